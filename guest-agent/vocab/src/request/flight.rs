//! What the agent asks `testbed-flight` to do. `testbed-flight request
//! FILE` reads one [`FlightRequest`]; `testbed-flight bench --server …`
//! parses the same [`BenchRequest`] from its flags (feature `cli`), so the
//! agent's field and the helper's flag are one declaration. The small
//! enums the requests name (operations, clients, column sets, pipelines)
//! live here too: the helper adds its behaviour to them, the agent names
//! them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One command of `testbed-flight`, as JSON: `{"command": "bench", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum FlightRequest {
    Serve(ServeRequest),
    Bench(Box<BenchRequest>),
    PyServe(PyServeRequest),
    PyBench(Box<BenchRequest>),
    ServerCpu(ServerCpuRequest),
    GenCert(GenCertRequest),
    Query(QueryRequest),
    Ingest(IngestRequest),
    GenomicsServe(GenomicsServeRequest),
    GenomicsSend(GenomicsSendRequest),
}

impl FlightRequest {
    /// The subcommand it stands for, for messages.
    pub fn command(&self) -> &'static str {
        match self {
            FlightRequest::Serve(_) => "serve",
            FlightRequest::Bench(_) => "bench",
            FlightRequest::PyServe(_) => "py-serve",
            FlightRequest::PyBench(_) => "py-bench",
            FlightRequest::ServerCpu(_) => "server-cpu",
            FlightRequest::GenCert(_) => "gen-cert",
            FlightRequest::Query(_) => "query",
            FlightRequest::Ingest(_) => "ingest",
            FlightRequest::GenomicsServe(_) => "genomics-serve",
            FlightRequest::GenomicsSend(_) => "genomics-send",
        }
    }
}

/// Declares a fieldless enum whose names (serde's, clap's and `name()`)
/// are one list, with `ALL` and `from_name`.
macro_rules! named_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
        $vis enum $name {
            $($(#[$vm])* #[serde(rename = $text)] #[cfg_attr(feature = "cli", value(name = $text))] $variant,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The names, in `ALL`'s order.
            pub const NAMES: [&'static str; [$($text),*].len()] = [$($text),*];

            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value called `name`, if any.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.name() == name)
            }
        }
    };
}

named_enum! {
    /// Which Flight call a bulk benchmark drives.
    pub enum Op {
        Get = "get",
        Put = "put",
        Exchange = "exchange",
    }
}

named_enum! {
    /// IPC body compression of record batches (Arrow IPC codecs, not
    /// gRPC's).
    pub enum Compression {
        None = "none",
        Lz4 = "lz4",
        Zstd = "zstd",
    }
}

named_enum! {
    /// Which transport settings a run uses.
    ///
    /// - `tuned`: testbed-flight's flags as given (their defaults are what
    ///   it ships with); pyarrow's client gets gRPC C++'s nearest channel
    ///   arguments (32 MiB lookahead, 1 MiB frames).
    /// - `defaults`: each implementation as it ships, whatever the flags
    ///   say: testbed-flight's shipped settings
    ///   ([`TransportSettings::default`]), pyarrow with no channel
    ///   arguments.
    /// - `library`: tonic's and hyper's own settings for ours (64 KiB
    ///   windows, 16 KiB frames: what testbed-flight shipped with before it
    ///   chose its own), pyarrow as under `defaults`.
    ///
    /// pyarrow's server has no knobs and runs its defaults under all three.
    pub enum Profile {
        Tuned = "tuned",
        Defaults = "defaults",
        Library = "library",
    }
}

named_enum! {
    /// The query table's columns; its name is `nyc_taxi` whatever the set,
    /// so every server answers the same SQL.
    pub enum ColumnSet {
        /// The yellow-cab trip record: ints, timestamps, money, short strings.
        Taxi = "taxi",
        /// Eight `integer` columns over the whole i32 range.
        Ints = "ints",
        /// Eight `text` columns of 1 to 16 characters (8.5 on average).
        StringsShort = "strings-short",
        /// Two `text` columns of 200 to 1000 characters (600 on average).
        StringsLong = "strings-long",
    }
}

named_enum! {
    /// A client of the query comparison.
    pub enum QueryClient {
        /// ODBC (psqlODBC), SQLGetData per value: the pyodbc way.
        OdbcRow = "odbc-row",
        /// ODBC with bound columnar buffers: the turbodbc way.
        OdbcBlock = "odbc-block",
        /// tokio-postgres: PostgreSQL's wire protocol, binary rows (what a
        /// libpq client reads; this is not libpq itself).
        TokioPostgres = "tokio-postgres",
        /// Flight SQL server that reads PostgreSQL with binary COPY into Arrow.
        FlightSql = "flight-sql",
        /// Flight SQL server that reads PostgreSQL's binary rows (the
        /// extended query protocol), so COPY's share of the difference shows.
        FlightSqlRows = "flight-sql-rows",
        /// Flight SQL server that reads Parquet (source effect).
        FlightSqlParquet = "flight-sql-parquet",
        /// DataFusion over the Parquet file, served over Flight SQL.
        DatafusionFlightSql = "datafusion-flight-sql",
        /// The same DataFusion context over PostgreSQL's wire protocol,
        /// read by tokio-postgres (binary rows).
        DatafusionPgwireTokioPostgres = "datafusion-pgwire-tokio-postgres",
        /// … read by psqlODBC, SQLGetData per value.
        DatafusionPgwireOdbcRow = "datafusion-pgwire-odbc-row",
        /// … read by psqlODBC into bound columnar buffers.
        DatafusionPgwireOdbcBlock = "datafusion-pgwire-odbc-block",
    }
}

impl QueryClient {
    /// Whether it reads PostgreSQL (directly or through Flight SQL).
    pub fn reads_postgres(self) -> bool {
        matches!(
            self,
            QueryClient::OdbcRow
                | QueryClient::OdbcBlock
                | QueryClient::TokioPostgres
                | QueryClient::FlightSql
                | QueryClient::FlightSqlRows
        )
    }

    /// Whether it reads the DataFusion engine (over either protocol).
    pub fn reads_datafusion(self) -> bool {
        matches!(
            self,
            QueryClient::DatafusionFlightSql
                | QueryClient::DatafusionPgwireTokioPostgres
                | QueryClient::DatafusionPgwireOdbcRow
                | QueryClient::DatafusionPgwireOdbcBlock
        )
    }
}

named_enum! {
    /// A client of the ingest comparison.
    pub enum IngestClient {
        /// Our Flight SQL client's bulk ingest (DoPut CommandStatementIngest).
        FlightSqlIngest = "flight-sql-ingest",
        /// ADBC's `adbc_ingest` over Flight SQL (Python, from PyPI).
        AdbcIngest = "adbc-ingest",
        /// `COPY … FROM STDIN (FORMAT binary)` over tokio-postgres.
        CopyBinary = "copy-binary",
        /// Multi-row prepared `INSERT`s over tokio-postgres, one transaction.
        InsertBatched = "insert-batched",
        /// psqlODBC with bound parameter arrays, one transaction.
        OdbcArray = "odbc-array",
    }
}

named_enum! {
    /// How the genomics sender moves a region.
    pub enum Pipeline {
        /// DoPut with gRPC's default transport settings on both sides.
        Flight = "flight",
        /// DoPut with the tuned profile of flight-bulk (32 MiB HTTP/2
        /// windows, large frames) on both sides.
        FlightTuned = "flight-tuned",
        /// BAM over a plain TCP connection (the kernel's socket defaults).
        Bam = "bam",
    }
}

#[allow(clippy::derivable_impls)] // the macro derives no Default
impl Default for Op {
    fn default() -> Op {
        Op::Get
    }
}

#[allow(clippy::derivable_impls)]
impl Default for Compression {
    fn default() -> Compression {
        Compression::None
    }
}

#[allow(clippy::derivable_impls)]
impl Default for Profile {
    fn default() -> Profile {
        Profile::Tuned
    }
}

#[allow(clippy::derivable_impls)]
impl Default for ColumnSet {
    fn default() -> ColumnSet {
        ColumnSet::Taxi
    }
}

/// HTTP/2 and gRPC settings. tonic's defaults (64 KiB windows, 4 MiB
/// decode limit, 16 KiB frames) cap one stream far below what TCP carries:
/// pyarrow's client put into our server at 224–330 MB/s with them against
/// 345–576 MB/s into pyarrow's own, and at 599–1065 MB/s with the fixed
/// 32/64 MiB windows and 1 MiB frames testbed-flight ships with (host
/// loopback, 5 repetitions each; hyper's adaptive window reached 157–475).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct TransportSettings {
    /// gRPC message size limit for encoding and decoding, both sides.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 30))]
    pub max_message_bytes: usize,
    /// HTTP/2 initial stream window (ignored with --adaptive-window).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 32 << 20))]
    pub stream_window_bytes: u32,
    /// HTTP/2 initial connection window (ignored with --adaptive-window).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 64 << 20))]
    pub connection_window_bytes: u32,
    /// Let hyper size windows from BDP estimates instead of the fixed ones.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = false, action = clap::ArgAction::Set))]
    pub adaptive_window: bool,
    /// HTTP/2 max frame size advertised (16 KiB .. 16 MiB - 1).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1 << 20))]
    pub max_frame_bytes: u32,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub tcp_nodelay: bool,
    /// Encode the benchmark batch once and re-send the same bytes (what
    /// C++'s zero-copy IPC payloads amount to). Compressed streams are
    /// always re-encoded per batch so compression cost is measured.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub reuse_encoded_batch: bool,
    /// Decode received bodies in place (no copy into a fresh aligned buffer
    /// unless a column buffer is misaligned for its type).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub zero_copy_decode: bool,
    /// Raise glibc malloc's mmap and trim thresholds so the per-message
    /// buffers (up to a few MB) are reused instead of mapped and faulted in
    /// anew each time. Process-wide; applied by the CLI commands.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub malloc_tuning: bool,
}

impl Default for TransportSettings {
    /// What testbed-flight ships with.
    fn default() -> Self {
        TransportSettings {
            max_message_bytes: 1 << 30,
            stream_window_bytes: 32 << 20,
            connection_window_bytes: 64 << 20,
            adaptive_window: false,
            max_frame_bytes: 1 << 20,
            tcp_nodelay: true,
            reuse_encoded_batch: true,
            zero_copy_decode: true,
            malloc_tuning: true,
        }
    }
}

impl TransportSettings {
    /// What tonic and hyper use when nobody tunes them: 64 KiB - 1 windows,
    /// 16 KiB frames, tonic's 4 MiB decode limit, glibc malloc as it is.
    /// TCP_NODELAY stays on (tonic's client and gRPC C++ both set it), and
    /// so do the two zero-copy choices: they are how this implementation
    /// handles its buffers, as C++ Flight does, not transport settings.
    pub fn library_defaults() -> Self {
        TransportSettings {
            max_message_bytes: 4 << 20,
            stream_window_bytes: 65_535,
            connection_window_bytes: 65_535,
            adaptive_window: false,
            max_frame_bytes: 16_384,
            tcp_nodelay: true,
            reuse_encoded_batch: true,
            zero_copy_decode: true,
            malloc_tuning: false,
        }
    }
}

impl Profile {
    /// The settings of this profile: `tuned` keeps `flags` as given.
    pub fn apply(self, flags: TransportSettings) -> TransportSettings {
        match self {
            Profile::Tuned => flags,
            Profile::Defaults => TransportSettings::default(),
            Profile::Library => TransportSettings::library_defaults(),
        }
    }
}

/// `serve`: the bulk benchmark's server (DoGet/DoPut/DoExchange) until
/// SIGINT/SIGTERM; its first line says where it listens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct ServeRequest {
    /// IP:PORT (port 0 picks a free one) or unix:/path.
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1:31337"))]
    #[serde(default = "default_serve_addr")]
    pub addr: String,
    /// Directory holding ca.pem, server.pem, server.key (from gen-cert).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub tls_dir: Option<PathBuf>,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(default)]
    pub settings: TransportSettings,
    /// `defaults`: what testbed-flight ships with, whatever the flags say;
    /// `library`: tonic's and hyper's own settings.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "tuned"))]
    #[serde(default)]
    pub profile: Profile,
    /// Tokio worker threads (default: one per CPU).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub runtime_threads: Option<usize>,
}

impl ServeRequest {
    /// Serving at `addr` with every other field at its default.
    pub fn new(addr: &str) -> ServeRequest {
        ServeRequest {
            addr: addr.to_string(),
            tls_dir: None,
            settings: TransportSettings::default(),
            profile: Profile::default(),
            runtime_threads: None,
        }
    }
}

/// `bench` (ours) and `py-bench` (pyarrow's client): the bulk client
/// against a server; one JSON line per stream, then a summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct BenchRequest {
    /// Server address: IP:PORT or unix:/path.
    #[cfg_attr(feature = "cli", arg(long))]
    pub server: String,
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "get"))]
    #[serde(default)]
    pub op: Op,
    /// Shorthand for --op put.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "op"))]
    #[serde(default)]
    pub put: bool,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u32")]
    pub streams: u32,
    /// Concurrent client workers (default: one per stream).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    #[serde(default)]
    pub threads: u32,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 200_980))]
    #[serde(default = "default_records_per_stream")]
    pub records_per_stream: u64,
    /// Records per batch (4096 for DoGet and 2048 for DoPut in the paper).
    #[cfg_attr(
        feature = "cli",
        arg(long = "batch", alias = "records-per-batch", default_value_t = 4096)
    )]
    #[serde(default = "default_records_per_batch")]
    pub records_per_batch: u32,
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "none"))]
    #[serde(default)]
    pub compression: Compression,
    /// CA certificate (ca.pem from gen-cert); given means TLS.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// Check row counts and checksums.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub verify: bool,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// One JSON line per stream, then a summary line.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 5.0))]
    #[serde(default = "five")]
    pub connect_timeout_secs: f64,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub runtime_threads: Option<usize>,
    /// Keep every received batch until its stream ends (pyarrow's
    /// `read_all`); a DoPut asks the server to do the same. Default: drop
    /// each batch once counted, on both sides.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub keep_batches: bool,
    /// `defaults`: what testbed-flight ships with, whatever the flags say;
    /// `library`: tonic's and hyper's own settings.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "tuned"))]
    #[serde(default)]
    pub profile: Profile,
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(default)]
    pub settings: TransportSettings,
}

impl BenchRequest {
    /// Against `server`, every other field at its default.
    pub fn new(server: &str) -> BenchRequest {
        BenchRequest {
            server: server.to_string(),
            op: Op::default(),
            put: false,
            streams: one_u32(),
            threads: 0,
            records_per_stream: default_records_per_stream(),
            records_per_batch: default_records_per_batch(),
            compression: Compression::default(),
            tls_ca: None,
            verify: false,
            seed: one_u64(),
            json: false,
            connect_timeout_secs: five(),
            runtime_threads: None,
            keep_batches: false,
            profile: Profile::default(),
            settings: TransportSettings::default(),
        }
    }
}

/// `py-serve`: pyarrow's Flight server with the bulk benchmark's semantics
/// (python3 or $TESTBED_PYTHON), until SIGINT/SIGTERM; first line as
/// `serve`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct PyServeRequest {
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1:0"))]
    #[serde(default = "any_port")]
    pub addr: String,
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub tls_dir: Option<PathBuf>,
}

/// `server-cpu`: the CPU seconds a testbed-flight server (`serve`,
/// `genomics-serve`) has used so far, asked by its `cpu` action; one JSON
/// line `{"cpu_s": x}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct ServerCpuRequest {
    #[cfg_attr(feature = "cli", arg(long))]
    pub server: String,
    /// The CA of a TLS server (gen-cert's ca.pem).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 10.0))]
    #[serde(default = "ten")]
    pub connect_timeout_secs: f64,
}

/// `gen-cert`: a CA and a server certificate (name "localhost") for TLS
/// runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct GenCertRequest {
    #[cfg_attr(feature = "cli", arg(long))]
    pub dir: PathBuf,
}

/// `--client-cpus`/`--server-cpus` of the query and ingest runs, where
/// servers and clients share one process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct CpuPins {
    /// Host CPUs of the clients ("1", "0,2-3"); with --server-cpus, never
    /// one CPU in both. Default: unpinned.
    #[cfg_attr(feature = "cli", arg(long))]
    pub client_cpus: Option<String>,
    /// Host CPUs of the servers (our Flight SQL and pgwire runtime,
    /// PostgreSQL).
    #[cfg_attr(feature = "cli", arg(long))]
    pub server_cpus: Option<String>,
}

/// `query`: the query comparison (PostgreSQL via ODBC, tokio-postgres,
/// Flight SQL; DataFusion over Flight SQL and pgwire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// N of `LIMIT N`, one point per value.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_delimiter = ',', default_value = "1000,100000")
    )]
    #[serde(default = "default_query_rows")]
    pub rows: Vec<u64>,
    /// Rows loaded (default: the largest N).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub table_rows: Option<u64>,
    /// The table's columns: the taxi mix, or one type only.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "taxi"))]
    #[serde(default)]
    pub columns: ColumnSet,
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "odbc-row,odbc-block,tokio-postgres,flight-sql,flight-sql-rows,flight-sql-parquet,datafusion-flight-sql,datafusion-pgwire-tokio-postgres,datafusion-pgwire-odbc-row,datafusion-pgwire-odbc-block"
        )
    )]
    #[serde(default = "all_query_clients")]
    pub clients: Vec<QueryClient>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u32")]
    pub repetitions: u32,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// Rows per Arrow batch (Flight SQL) and per ODBC block.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 65_536))]
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// Where PostgreSQL's data directory and the Parquet file go (default: a
    /// temporary directory, removed afterwards).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
    /// One JSON line per measurement instead of a table.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
    /// Clients and servers on separate host CPUs.
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(default)]
    pub pins: CpuPins,
}

impl QueryRequest {
    /// Every field at its default.
    pub fn new() -> QueryRequest {
        QueryRequest {
            rows: default_query_rows(),
            table_rows: None,
            columns: ColumnSet::default(),
            clients: all_query_clients(),
            repetitions: one_u32(),
            seed: one_u64(),
            batch_rows: default_batch_rows(),
            run_dir: None,
            json: false,
            pins: CpuPins::default(),
        }
    }
}

impl Default for QueryRequest {
    fn default() -> Self {
        QueryRequest::new()
    }
}

/// `ingest`: the same rows written into PostgreSQL by Flight SQL bulk
/// ingest (ours and ADBC's), binary COPY, batched INSERT and psqlODBC array
/// inserts; each table checked against the generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    /// Rows written, one point per value.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_delimiter = ',', default_value = "100000")
    )]
    #[serde(default = "default_ingest_rows")]
    pub rows: Vec<u64>,
    /// The table's columns: the taxi mix, or one type only.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "taxi"))]
    #[serde(default)]
    pub columns: ColumnSet,
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "flight-sql-ingest,adbc-ingest,copy-binary,insert-batched,odbc-array"
        )
    )]
    #[serde(default = "all_ingest_clients")]
    pub clients: Vec<IngestClient>,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u32")]
    pub repetitions: u32,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u64")]
    pub seed: u64,
    /// Rows per Arrow batch sent (Flight SQL, COPY), cut to at most 8 MiB
    /// of values per batch.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 65_536))]
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// Rows per INSERT statement and per ODBC parameter array.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1000))]
    #[serde(default = "default_insert_rows")]
    pub insert_rows: usize,
    /// Where PostgreSQL's data directory and the input files go (default:
    /// a private temporary directory, removed afterwards).
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub run_dir: Option<PathBuf>,
    /// One JSON line per measurement instead of a table.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
    /// Clients and servers on separate host CPUs.
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(default)]
    pub pins: CpuPins,
}

impl IngestRequest {
    /// Every field at its default.
    pub fn new() -> IngestRequest {
        IngestRequest {
            rows: default_ingest_rows(),
            columns: ColumnSet::default(),
            clients: all_ingest_clients(),
            repetitions: one_u32(),
            seed: one_u64(),
            batch_rows: default_batch_rows(),
            insert_rows: default_insert_rows(),
            run_dir: None,
            json: false,
            pins: CpuPins::default(),
        }
    }
}

impl Default for IngestRequest {
    fn default() -> Self {
        IngestRequest::new()
    }
}

/// `genomics-serve`: the genomics receiver (DoPut of a region's ArrowSAM
/// batches, and a BAM listener); sorts and marks duplicates per region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct GenomicsServeRequest {
    /// Flight (DoPut) listening address, IP:PORT (port 0 picks one).
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1:0"))]
    #[serde(default = "any_port")]
    pub addr: String,
    /// Flight listening address with the tuned transport settings.
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1:0"))]
    #[serde(default = "any_port")]
    pub tuned_addr: String,
    /// BAM listening address, IP:PORT.
    #[cfg_attr(feature = "cli", arg(long, default_value = "127.0.0.1:0"))]
    #[serde(default = "any_port")]
    pub bam_addr: String,
    /// Sort and duplicate-marking workers per region.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_usize")]
    pub threads: usize,
}

impl GenomicsServeRequest {
    /// Every field at its default: all three listeners on a free loopback port.
    pub fn new() -> GenomicsServeRequest {
        GenomicsServeRequest {
            addr: any_port(),
            tuned_addr: any_port(),
            bam_addr: any_port(),
            threads: one_usize(),
        }
    }
}

impl Default for GenomicsServeRequest {
    fn default() -> Self {
        GenomicsServeRequest::new()
    }
}

/// `genomics-send`: a SAM file's regions moved by Flight and by BAM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields)]
pub struct GenomicsSendRequest {
    /// The aligned SAM (testbed-asam prepare's `sam`).
    #[cfg_attr(feature = "cli", arg(long))]
    pub sam: PathBuf,
    /// The receiver's Flight address.
    #[cfg_attr(feature = "cli", arg(long))]
    pub server: String,
    /// The receiver's tuned Flight address (for `flight-tuned`).
    #[cfg_attr(feature = "cli", arg(long, default_value = ""))]
    #[serde(default)]
    pub tuned_server: String,
    /// The receiver's BAM address.
    #[cfg_attr(feature = "cli", arg(long))]
    pub bam_server: String,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 4))]
    #[serde(default = "four")]
    pub regions: u32,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_u32")]
    pub repetitions: u32,
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "flight,flight-tuned,bam"
        )
    )]
    #[serde(default = "all_pipelines")]
    pub pipelines: Vec<Pipeline>,
    /// BGZF compression workers of the BAM sender.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    #[serde(default = "one_usize")]
    pub threads: usize,
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 10.0))]
    #[serde(default = "ten")]
    pub connect_timeout_secs: f64,
    /// Send each region while the receiver processes the one before.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub overlap: bool,
    /// One JSON line per pipeline × repetition.
    #[cfg_attr(feature = "cli", arg(long))]
    #[serde(default)]
    pub json: bool,
}

impl GenomicsSendRequest {
    /// `sam` to the three listeners, every other field at its default.
    pub fn new(sam: PathBuf, server: &str, bam_server: &str) -> GenomicsSendRequest {
        GenomicsSendRequest {
            sam,
            server: server.to_string(),
            tuned_server: String::new(),
            bam_server: bam_server.to_string(),
            regions: four(),
            repetitions: one_u32(),
            pipelines: all_pipelines(),
            threads: one_usize(),
            connect_timeout_secs: ten(),
            overlap: false,
            json: false,
        }
    }
}

fn one_u32() -> u32 {
    1
}

fn one_u64() -> u64 {
    1
}

fn one_usize() -> usize {
    1
}

fn four() -> u32 {
    4
}

fn five() -> f64 {
    5.0
}

fn ten() -> f64 {
    10.0
}

fn any_port() -> String {
    "127.0.0.1:0".into()
}

fn default_serve_addr() -> String {
    "127.0.0.1:31337".into()
}

fn default_records_per_stream() -> u64 {
    200_980
}

fn default_records_per_batch() -> u32 {
    4096
}

fn default_batch_rows() -> usize {
    65_536
}

fn default_insert_rows() -> usize {
    1000
}

fn default_query_rows() -> Vec<u64> {
    vec![1000, 100_000]
}

fn default_ingest_rows() -> Vec<u64> {
    vec![100_000]
}

fn all_query_clients() -> Vec<QueryClient> {
    QueryClient::ALL.to_vec()
}

fn all_ingest_clients() -> Vec<IngestClient> {
    IngestClient::ALL.to_vec()
}

fn all_pipelines() -> Vec<Pipeline> {
    Pipeline::ALL.to_vec()
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    enum Cli {
        Serve(ServeRequest),
        Bench(Box<BenchRequest>),
        PyServe(PyServeRequest),
        ServerCpu(ServerCpuRequest),
        Query(QueryRequest),
        Ingest(IngestRequest),
        GenomicsServe(GenomicsServeRequest),
        GenomicsSend(GenomicsSendRequest),
    }

    fn parse(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("testbed-flight").chain(args.iter().copied()))
    }

    fn json(v: serde_json::Value) -> FlightRequest {
        serde_json::from_value(v).unwrap()
    }

    /// The flags' defaults (clap's) and the request's (serde's, and `new`)
    /// are written twice; this holds them equal.
    #[test]
    fn the_command_lines_defaults_are_the_requests() {
        let Cli::Serve(s) = parse(&["serve"]) else {
            panic!()
        };
        assert_eq!(s, ServeRequest::new("127.0.0.1:31337"));
        assert_eq!(
            json(serde_json::json!({"command": "serve"})),
            FlightRequest::Serve(s)
        );

        let Cli::Bench(b) = parse(&["bench", "--server", "h:1"]) else {
            panic!()
        };
        assert_eq!(*b, BenchRequest::new("h:1"));
        assert_eq!(
            json(serde_json::json!({"command": "bench", "server": "h:1"})),
            FlightRequest::Bench(b)
        );

        let Cli::PyServe(p) = parse(&["py-serve"]) else {
            panic!()
        };
        assert_eq!(
            json(serde_json::json!({"command": "py-serve"})),
            FlightRequest::PyServe(p)
        );

        let Cli::ServerCpu(c) = parse(&["server-cpu", "--server", "h:1"]) else {
            panic!()
        };
        assert_eq!(
            json(serde_json::json!({"command": "server-cpu", "server": "h:1"})),
            FlightRequest::ServerCpu(c)
        );

        let Cli::Query(q) = parse(&["query"]) else {
            panic!()
        };
        assert_eq!(q, QueryRequest::new());
        assert_eq!(
            json(serde_json::json!({"command": "query"})),
            FlightRequest::Query(q)
        );

        let Cli::Ingest(i) = parse(&["ingest"]) else {
            panic!()
        };
        assert_eq!(i, IngestRequest::new());
        assert_eq!(
            json(serde_json::json!({"command": "ingest"})),
            FlightRequest::Ingest(i)
        );

        let Cli::GenomicsServe(g) = parse(&["genomics-serve"]) else {
            panic!()
        };
        assert_eq!(g, GenomicsServeRequest::new());
        assert_eq!(
            json(serde_json::json!({"command": "genomics-serve"})),
            FlightRequest::GenomicsServe(g)
        );

        let Cli::GenomicsSend(g) = parse(&[
            "genomics-send",
            "--sam",
            "/a.sam",
            "--server",
            "h:1",
            "--bam-server",
            "h:2",
        ]) else {
            panic!()
        };
        assert_eq!(g, GenomicsSendRequest::new("/a.sam".into(), "h:1", "h:2"));
        assert_eq!(
            json(
                serde_json::json!({"command": "genomics-send", "sam": "/a.sam", "server": "h:1", "bam_server": "h:2"})
            ),
            FlightRequest::GenomicsSend(g)
        );
    }

    #[test]
    fn enum_names_are_one_list_for_serde_clap_and_name() {
        use clap::ValueEnum;
        for c in QueryClient::ALL {
            assert_eq!(QueryClient::from_name(c.name()), Some(*c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
            assert_eq!(c.to_possible_value().unwrap().get_name(), c.name());
        }
        assert_eq!(
            IngestClient::ALL
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>(),
            super::super::super::flight::INGEST_CLIENTS
        );
        assert_eq!(
            QueryClient::ALL
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>(),
            super::super::super::flight::QUERY_CLIENTS
        );
        assert_eq!(
            ColumnSet::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
            super::super::super::flight::QUERY_COLUMN_SETS
        );
        assert_eq!(
            ColumnSet::from_name("strings-long"),
            Some(ColumnSet::StringsLong)
        );
        assert_eq!(Pipeline::from_name("nope"), None);
    }

    #[test]
    fn an_unknown_field_or_value_is_named() {
        let e = serde_json::from_value::<FlightRequest>(
            serde_json::json!({"command": "ingest", "client": ["copy-binary"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("client"), "{e}");
        let e = serde_json::from_value::<FlightRequest>(
            serde_json::json!({"command": "ingest", "clients": ["copy"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("copy"), "{e}");
    }
}
