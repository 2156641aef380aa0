/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the chain programs and the guest agent agree on: the meaning of the
 * scratch words (struct storage_chain_ctx.scratch, copied in from and back
 * out to user space by chained_read(2)). Mirrored in Rust by
 * guest-agent/src/bpf/abi.rs; keep the two in step.
 */
#ifndef CHAIN_ABI_H
#define CHAIN_ABI_H

/* btree_lookup: a BPF-KV point lookup. */
#define BT_KEY		0	/* in: the key looked up */
#define BT_VALUE	1	/* out: byte offset of the key's 64 B value */
#define BT_PHASE	2	/* in 0; 1 once the value's block was asked for */
#define BT_ERROR	3	/* out: 0, or one of BT_ERR_* */
#define BT_NODES	4	/* out: nodes parsed */

#define BT_PHASE_NODES	0
#define BT_PHASE_VALUE	1

#define BT_ERR_SHORT	1	/* the block is shorter than a node */
#define BT_ERR_NUM	2	/* num is 0 or above the fanout */
#define BT_ERR_TYPE	3	/* neither inner node nor leaf */
#define BT_ERR_NO_CHILD	4	/* every key of an inner node is above the key */
#define BT_ERR_NO_KEY	5	/* the leaf does not hold the key */

/* synthetic_chain: the HotOS chain of reads at seeded random offsets. */
#define SC_STATE	0	/* in/out: SplitMix64 state after the first offset */
#define SC_SLOTS	1	/* in: number of 4 KiB-aligned offsets */
#define SC_DEPTH	2	/* in: reads per chain */
#define SC_SUM		3	/* out: xor of the first word of every block */

#define SC_ALIGN	4096

/* hook_attacks "jump": next_offset = scratch[0], verdict = scratch[1]. */
#define AT_NEXT		0
#define AT_VERDICT	1

#endif /* CHAIN_ABI_H */
