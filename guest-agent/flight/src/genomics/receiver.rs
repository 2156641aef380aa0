//! The receiving node: a Flight server whose DoPut takes one region's
//! ArrowSAM batches, and a TCP listener that takes one region as a BAM
//! stream per connection. Both answer twice: once the region is held as
//! ArrowSAM batches (the end of communication), and after sorting and
//! duplicate marking it ([`Processed`]).

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::{Stream, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use testbed_asam::load::SamTable;
use tonic::{Request, Response, Status, Streaming};

use super::bam;
use super::process::{Processed, process};
use crate::error::{FlightError, Result};
use crate::server::{RunningServer, ServerConfig, start_service};

type BoxStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send + 'static>>;

/// The DoPut descriptor's command: the region's SAM header (read groups,
/// references), which the BAM stream carries in its own header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegionCommand {
    pub region: u32,
    pub header_text: String,
}

/// The receiver's two answers per region (a PutResult's metadata, or a
/// line on the BAM connection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum Reply {
    Received { records: u64 },
    Processed(Processed),
    Error { message: String },
}

#[derive(Clone)]
pub struct GenomicsService {
    /// Sort and duplicate-marking workers per region.
    threads: usize,
}

fn reply_bytes(r: &Reply) -> std::result::Result<bytes::Bytes, Status> {
    serde_json::to_vec(r)
        .map(Into::into)
        .map_err(|e| Status::internal(e.to_string()))
}

#[tonic::async_trait]
impl FlightService for GenomicsService {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;
    type DoExchangeStream = BoxStream<FlightData>;

    async fn handshake(
        &self,
        _r: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("no handshake"))
    }
    async fn list_flights(
        &self,
        _r: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn get_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn poll_flight_info(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn get_schema(
        &self,
        _r: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
    async fn do_get(
        &self,
        _r: Request<Ticket>,
    ) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        let mut input = request.into_inner();
        let Some(first) = input.message().await? else {
            return Err(Status::invalid_argument(
                "DoPut stream ended before any message",
            ));
        };
        let cmd: RegionCommand = first
            .flight_descriptor
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("the first DoPut message has no descriptor"))
            .and_then(|d| {
                serde_json::from_slice(&d.cmd)
                    .map_err(|e| Status::invalid_argument(format!("DoPut descriptor command: {e}")))
            })?;
        let threads = self.threads;
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(async move {
            let data = futures::stream::once(async { Ok(first) })
                .chain(input)
                .map_err(arrow_flight::error::FlightError::from);
            let batches: std::result::Result<Vec<_>, _> =
                FlightRecordBatchStream::new_from_flight_data(data)
                    .try_collect()
                    .await;
            let answer = async {
                let batches = batches
                    .map_err(|e| Status::invalid_argument(format!("region {}: {e}", cmd.region)))?;
                let records = batches.iter().map(|b| b.num_rows() as u64).sum();
                let received = reply_bytes(&Reply::Received { records })?;
                let _ = tx
                    .send(Ok(PutResult {
                        app_metadata: received,
                    }))
                    .await;
                let names = reference_names(&cmd.header_text)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                let done = tokio::task::spawn_blocking(move || {
                    process(&batches, &cmd.header_text, &names, threads)
                })
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| Status::internal(e.to_string()))?;
                reply_bytes(&Reply::Processed(done))
            };
            let last = answer.await.map(|m| PutResult { app_metadata: m });
            let _ = tx.send(last).await;
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    /// `cpu`: this process's CPU seconds so far (every listener of the
    /// receiver is this process), so the sender can charge each pipeline
    /// the receiver's CPU.
    async fn do_action(
        &self,
        r: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        crate::cpu::answer(&r.into_inner()).map(Response::new)
    }
    async fn list_actions(
        &self,
        _r: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        Ok(Response::new(Box::pin(futures::stream::empty())))
    }
    async fn do_exchange(
        &self,
        _r: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("DoPut only"))
    }
}

/// The reference names of a SAM header, in order.
pub fn reference_names(header_text: &str) -> Result<Vec<String>> {
    let header: noodles::sam::Header = header_text
        .parse()
        .map_err(|e| FlightError::Param(format!("SAM header: {e}")))?;
    Ok(testbed_asam::load::reference_names(&header))
}

/// Starts the Flight receiver (library-default transport settings).
pub async fn start_flight(cfg: &ServerConfig, threads: usize) -> Result<RunningServer> {
    let limit = cfg.settings.max_message_bytes;
    let svc = FlightServiceServer::new(GenomicsService { threads })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(limit);
    start_service(cfg, svc).await
}

/// The BAM receiver: one thread accepting, one per connection; stops
/// accepting once `stop` is set (checked between connections).
pub struct BamReceiver {
    pub addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl BamReceiver {
    pub fn start(addr: &str, threads: usize) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| FlightError::Other(format!("bind the BAM receiver on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| FlightError::Other(format!("BAM receiver address: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                std::thread::spawn(move || {
                    if let Err(e) = serve_bam(conn, threads) {
                        eprintln!("BAM receiver: {e}");
                    }
                });
            }
        });
        Ok(BamReceiver { addr: local, stop })
    }
}

impl Drop for BamReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// One connection: a BAM stream to EOF, then the two replies as lines.
fn serve_bam(conn: TcpStream, threads: usize) -> Result<()> {
    let io = |e: std::io::Error| FlightError::Other(format!("BAM connection: {e}"));
    let mut out = conn.try_clone().map_err(io)?;
    let reply = |out: &mut TcpStream, r: &Reply| -> Result<()> {
        let mut line = serde_json::to_vec(r).map_err(|e| FlightError::Other(e.to_string()))?;
        line.push(b'\n');
        out.write_all(&line).map_err(io)
    };
    let table: SamTable = match bam::receive(BufReader::with_capacity(1 << 20, conn), threads) {
        Ok(t) => t,
        Err(e) => {
            let _ = reply(
                &mut out,
                &Reply::Error {
                    message: e.to_string(),
                },
            );
            return Err(e);
        }
    };
    reply(
        &mut out,
        &Reply::Received {
            records: table.records() as u64,
        },
    )?;
    let done = process(
        &table.batches,
        &table.header_text,
        &table.reference_names,
        threads,
    )?;
    reply(&mut out, &Reply::Processed(done))
}
