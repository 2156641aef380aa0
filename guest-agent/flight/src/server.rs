//! The bulk Flight server: GetFlightInfo plans one endpoint per stream,
//! DoGet re-sends one pre-built batch, DoPut and DoExchange receive (and
//! check) the benchmark batches. A bad request fails only its own call.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaAsIpc, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status, Streaming};

use crate::addr::Addr;
use crate::codec::{BatchDecoder, BatchEncoder, Decoded};
use crate::data::{
    PerfCommand, PerfTicket, PutCommand, PutSummary, ROW_BYTES, batch_plan, check_batch, checksum,
    make_batch, schema,
};
use crate::error::{FlightError, Result};
use crate::settings::{Compression, TransportSettings};
use crate::tls::TlsFiles;
use crate::transport::{Listener, server_builder};

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send + 'static>>;

/// The batch of one (rows, seed), and its uncompressed encoding.
struct Prebuilt {
    batch: RecordBatch,
    encoded: FlightData,
}

pub struct BulkService {
    settings: TransportSettings,
    cache: Mutex<HashMap<(u32, u64), Arc<Prebuilt>>>,
}

fn status(e: FlightError) -> Status {
    match e {
        FlightError::Param(_)
        | FlightError::Ipc(_)
        | FlightError::SchemaMismatch { .. }
        | FlightError::Verify(_) => Status::invalid_argument(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

impl BulkService {
    pub fn new(settings: TransportSettings) -> Self {
        BulkService {
            settings,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn prebuilt(&self, rows: u32, seed: u64) -> Result<Arc<Prebuilt>> {
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| FlightError::Other("batch cache poisoned".into()))?;
        if let Some(p) = cache.get(&(rows, seed)) {
            return Ok(p.clone());
        }
        let batch = make_batch(rows, seed)?;
        let encoded = BatchEncoder::new(Compression::None)?.encode(&batch)?;
        let p = Arc::new(Prebuilt { batch, encoded });
        // Bounded: benchmarks use a handful of batch sizes.
        if cache.len() >= 16 {
            cache.clear();
        }
        cache.insert((rows, seed), p.clone());
        Ok(p)
    }

    fn get_stream(&self, t: &PerfTicket) -> Result<BoxStream<FlightData>> {
        check_batch(t.records_per_batch)?;
        let pre = self.prebuilt(t.records_per_batch, t.seed)?;
        let (full, tail) = batch_plan(t.records, t.records_per_batch);
        let mut enc = BatchEncoder::new(t.compression)?;
        let schema_msg = enc.schema(&schema());
        let reuse = self.settings.reuse_encoded_batch && t.compression == Compression::None;
        let mut tail_batch = (tail > 0).then(|| pre.batch.slice(0, tail as usize));
        let mut sent = 0u64;
        let batches = std::iter::from_fn(move || {
            if sent < full {
                sent += 1;
                Some(if reuse {
                    Ok(pre.encoded.clone())
                } else {
                    enc.encode(&pre.batch).map_err(status)
                })
            } else {
                tail_batch.take().map(|b| enc.encode(&b).map_err(status))
            }
        });
        Ok(Box::pin(futures::stream::iter(
            std::iter::once(Ok(schema_msg)).chain(batches),
        )))
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(bytes).map_err(|e| {
        Status::invalid_argument(format!(
            "{what} is not valid JSON for this server ({e}): {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))
    })
}

/// The PutCommand of a DoPut/DoExchange's first message.
fn put_command(first: &FlightData) -> Result<PutCommand, Status> {
    match &first.flight_descriptor {
        Some(d) if d.r#type == DescriptorType::Cmd as i32 && !d.cmd.is_empty() => {
            parse_json("descriptor command", &d.cmd)
        }
        // Path descriptors (pyarrow's default) or none: plain upload.
        _ => Ok(PutCommand {
            stream: 0,
            verify: false,
            keep: false,
        }),
    }
}

#[tonic::async_trait]
impl FlightService for BulkService {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented(
            "no authentication on the benchmark server",
        ))
    }

    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented(
            "flights are planned by GetFlightInfo",
        ))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let d = request.into_inner();
        let cmd: PerfCommand = parse_json("GetFlightInfo command", &d.cmd)?;
        cmd.validate().map_err(status)?;
        let mut info = FlightInfo::new()
            .try_with_schema(&schema())
            .map_err(|e| Status::internal(e.to_string()))?
            .with_descriptor(d)
            .with_total_records((u64::from(cmd.streams) * cmd.records_per_stream) as i64)
            .with_total_bytes((u64::from(cmd.streams) * cmd.records_per_stream * ROW_BYTES) as i64);
        for s in 0..cmd.streams {
            let ticket =
                serde_json::to_vec(&cmd.ticket(s)).map_err(|e| Status::internal(e.to_string()))?;
            info = info.with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)));
        }
        Ok(Response::new(info))
    }

    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("use GetFlightInfo"))
    }

    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let result = SchemaAsIpc::new(&schema(), &options)
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(e.to_string()))?;
        Ok(Response::new(result))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        let t: PerfTicket = parse_json("ticket", &request.into_inner().ticket)?;
        Ok(Response::new(self.get_stream(&t).map_err(status)?))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let mut input = request.into_inner();
        let Some(first) = input.message().await? else {
            return Err(Status::invalid_argument(
                "DoPut stream ended before any message",
            ));
        };
        let cmd = put_command(&first)?;
        let mut dec = BatchDecoder::new(Some(schema()), self.settings.zero_copy_decode);
        let mut sum = PutSummary {
            records: 0,
            batches: 0,
            bytes: 0,
            checksum: cmd.verify.then_some(0),
        };
        let mut next = Some(first);
        // With `keep`, every batch lives until the stream ends.
        let mut kept = Vec::new();
        while let Some(msg) = next {
            let decoded = dec.decode(&msg).map_err(|e| {
                Status::invalid_argument(format!("DoPut stream {}: {e}", cmd.stream))
            })?;
            if let Decoded::Batch(b) = decoded {
                sum.records += b.num_rows() as u64;
                sum.batches += 1;
                sum.bytes += b.num_rows() as u64 * ROW_BYTES;
                if let Some(c) = sum.checksum.as_mut() {
                    *c = c.wrapping_add(checksum(&b).map_err(status)?);
                }
                if cmd.keep {
                    kept.push(b);
                }
            }
            next = input.message().await?;
        }
        drop(kept);
        if dec.schema().is_none() {
            return Err(Status::invalid_argument(format!(
                "DoPut stream {}: no schema message received",
                cmd.stream
            )));
        }
        let meta = serde_json::to_vec(&sum).map_err(|e| Status::internal(e.to_string()))?;
        let result = PutResult {
            app_metadata: meta.into(),
        };
        Ok(Response::new(Box::pin(futures::stream::once(async {
            Ok(result)
        }))))
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        let mut dec = BatchDecoder::new(Some(schema()), self.settings.zero_copy_decode);
        // Echo every message after checking it decodes as the benchmark schema.
        let echo = request.into_inner().map(move |msg| {
            let mut msg = msg?;
            dec.decode(&msg)
                .map_err(|e| Status::invalid_argument(format!("DoExchange: {e}")))?;
            msg.flight_descriptor = None;
            Ok(msg)
        });
        Ok(Response::new(Box::pin(echo)))
    }

    /// `cpu`: this process's CPU seconds so far, for a client that charges
    /// a run the server's CPU from another machine.
    async fn do_action(
        &self,
        r: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        crate::cpu::answer(&r.into_inner()).map(Response::new)
    }

    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Ok(Response::new(Box::pin(futures::stream::empty())))
    }
}

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub addr: Addr,
    pub settings: TransportSettings,
    /// Directory with ca.pem/server.pem/server.key (see [`crate::tls`]).
    pub tls_dir: Option<std::path::PathBuf>,
}

/// A server running on the current tokio runtime.
pub struct RunningServer {
    pub addr: Addr,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<()>>,
}

impl RunningServer {
    /// Stops accepting, lets running calls finish, and waits.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.wait().await
    }

    /// Waits until the server ends (it only ends on error or stop).
    pub async fn wait(self) -> Result<()> {
        self.task
            .await
            .map_err(|e| FlightError::Other(format!("server task: {e}")))?
    }
}

/// Binds and starts serving `service`; returns once the socket is bound.
pub async fn start_service<S>(cfg: &ServerConfig, service: S) -> Result<RunningServer>
where
    S: tower::Service<http::Request<tonic::body::Body>, Error = std::convert::Infallible>
        + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    // Any body tonic's router takes (an interceptor wraps the plain one).
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    crate::settings::validate(&cfg.settings)?;
    let tls = match &cfg.tls_dir {
        Some(dir) => Some(crate::tls::server_config(&TlsFiles::in_dir(dir))?),
        None => None,
    };
    let mut builder = server_builder(&cfg.settings, tls)?;
    let router = builder.add_service(service);
    let listener = Listener::bind(&cfg.addr, &cfg.settings).await?;
    let addr = listener.addr().clone();
    let (tx, rx) = oneshot::channel::<()>();
    let stop = async {
        let _ = rx.await;
    };
    let shown = addr.to_string();
    let task = tokio::spawn(async move {
        let served = match listener {
            Listener::Tcp(incoming, _) => router.serve_with_incoming_shutdown(incoming, stop).await,
            Listener::Unix(incoming, _, path) => {
                let r = router.serve_with_incoming_shutdown(incoming, stop).await;
                let _ = std::fs::remove_file(path);
                r
            }
        };
        served.map_err(|e| {
            FlightError::Other(format!(
                "server on {shown}: {}",
                crate::transport::source_chain(&e)
            ))
        })
    });
    Ok(RunningServer {
        addr,
        shutdown: Some(tx),
        task,
    })
}

/// Starts the bulk benchmark server.
pub async fn start(cfg: &ServerConfig) -> Result<RunningServer> {
    let limit = cfg.settings.max_message_bytes;
    let svc = FlightServiceServer::new(BulkService::new(cfg.settings.clone()))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    start_service(cfg, svc).await
}
