//! Analyses of one workload's results that `show` prints: they read the
//! point records (the resolved workload and the summary table's rows).

pub mod btree_depth;
