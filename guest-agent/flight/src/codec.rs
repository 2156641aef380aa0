//! Record batch <-> FlightData, without the copies arrow-flight's generic
//! helpers make: the encoder can hand out one encoded batch many times
//! (clones of `Bytes` share the buffer), and the decoder wraps the received
//! body as an Arrow buffer in place.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::ipc::{CompressionType, MessageHeader, reader::RecordBatchDecoder, root_as_message};
use arrow_flight::{FlightData, SchemaAsIpc};

use crate::error::{FlightError, Result};
use crate::settings::Compression;

pub fn write_options(compression: Compression) -> Result<IpcWriteOptions> {
    let codec = match compression {
        Compression::None => None,
        Compression::Lz4 => Some(CompressionType::LZ4_FRAME),
        Compression::Zstd => Some(CompressionType::ZSTD),
    };
    Ok(IpcWriteOptions::default().try_with_compression(codec)?)
}

/// Encodes batches of one stream (schema first).
pub struct BatchEncoder {
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
}

impl BatchEncoder {
    pub fn new(compression: Compression) -> Result<Self> {
        Ok(BatchEncoder {
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            options: write_options(compression)?,
            context: IpcWriteContext::default(),
        })
    }

    pub fn schema(&self, schema: &Schema) -> FlightData {
        SchemaAsIpc::new(schema, &self.options).into()
    }

    /// One batch as one FlightData message (the benchmark's schemas have no
    /// dictionaries, so none are emitted).
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<FlightData> {
        let (dicts, data) =
            self.generator
                .encode(batch, &mut self.tracker, &self.options, &mut self.context)?;
        if !dicts.is_empty() {
            return Err(FlightError::Other(
                "dictionary-encoded columns are not supported by the bulk codec".into(),
            ));
        }
        Ok(data.into())
    }
}

/// What one received message was.
#[derive(Debug)]
pub enum Decoded {
    Schema(SchemaRef),
    Batch(RecordBatch),
    /// A message without IPC payload (e.g. app_metadata only).
    Empty,
}

/// Decodes one stream's messages, checking the schema if one is expected.
pub struct BatchDecoder {
    expected: Option<SchemaRef>,
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
    zero_copy: bool,
}

impl BatchDecoder {
    pub fn new(expected: Option<SchemaRef>, zero_copy: bool) -> Self {
        BatchDecoder {
            expected,
            schema: None,
            dictionaries: HashMap::new(),
            zero_copy,
        }
    }

    pub fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    pub fn decode(&mut self, data: &FlightData) -> Result<Decoded> {
        if data.data_header.is_empty() {
            return Ok(Decoded::Empty);
        }
        let message = root_as_message(&data.data_header)
            .map_err(|e| FlightError::Ipc(format!("corrupt IPC message header: {e}")))?;
        match message.header_type() {
            MessageHeader::Schema => {
                let got = Schema::try_from(data)
                    .map_err(|e| FlightError::Ipc(format!("corrupt IPC schema: {e}")))?;
                if let Some(expected) = &self.expected
                    && expected.fields() != got.fields()
                {
                    return Err(FlightError::SchemaMismatch {
                        expected: fields_text(expected),
                        got: fields_text(&got),
                    });
                }
                let got = Arc::new(got);
                self.schema = Some(got.clone());
                Ok(Decoded::Schema(got))
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(|| {
                    FlightError::Ipc("record batch received before the schema".into())
                })?;
                let header = message.header_as_record_batch().ok_or_else(|| {
                    FlightError::Ipc("record batch message without a batch header".into())
                })?;
                let body = if self.zero_copy {
                    Buffer::from(data.data_body.clone())
                } else {
                    Buffer::from(data.data_body.as_ref())
                };
                // arrow-ipc slices buffers without bounds checks (it panics
                // on a short body), so check the header against the body.
                let body_len = body.len() as u64;
                for b in header.buffers().into_iter().flatten() {
                    let end = (b.offset() as u64).checked_add(b.length() as u64);
                    if b.offset() < 0 || b.length() < 0 || end.is_none_or(|e| e > body_len) {
                        return Err(FlightError::Ipc(format!(
                            "corrupt IPC record batch: buffer at {}+{} outside the {body_len}-byte body",
                            b.offset(),
                            b.length()
                        )));
                    }
                }
                let version = message.version();
                let dictionaries = &self.dictionaries;
                // Last line of defence against other panics on hostile input.
                let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    RecordBatchDecoder::try_new(&body, header, schema, dictionaries, &version)
                        .and_then(|d| d.read_record_batch())
                }))
                .map_err(|_| {
                    FlightError::Ipc("corrupt IPC record batch (decoder panicked)".into())
                })?;
                let batch = decoded
                    .map_err(|e| FlightError::Ipc(format!("corrupt IPC record batch: {e}")))?;
                Ok(Decoded::Batch(batch))
            }
            MessageHeader::NONE => Ok(Decoded::Empty),
            other => Err(FlightError::Ipc(format!(
                "unsupported IPC message {}",
                other.variant_name().unwrap_or("UNKNOWN")
            ))),
        }
    }
}

fn fields_text(schema: &Schema) -> String {
    let fields: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{}: {}{}",
                f.name(),
                f.data_type(),
                if f.is_nullable() { "" } else { " not null" }
            )
        })
        .collect();
    format!("[{}]", fields.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{checksum, make_batch, schema};

    #[test]
    fn roundtrip_with_each_compression() {
        let batch = make_batch(1000, 3).unwrap();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut enc = BatchEncoder::new(c).unwrap();
            let s = enc.schema(&schema());
            let b = enc.encode(&batch).unwrap();
            for zero_copy in [true, false] {
                let mut dec = BatchDecoder::new(Some(schema()), zero_copy);
                assert!(matches!(dec.decode(&s).unwrap(), Decoded::Schema(_)));
                let Decoded::Batch(got) = dec.decode(&b).unwrap() else {
                    panic!("expected a batch");
                };
                assert_eq!(checksum(&got).unwrap(), checksum(&batch).unwrap());
                assert_eq!(got, batch);
            }
        }
    }

    #[test]
    fn garbage_and_wrong_schema_are_clear_errors() {
        let mut dec = BatchDecoder::new(Some(schema()), true);
        let junk = FlightData::new().with_data_header(vec![0xffu8; 40]);
        let err = dec.decode(&junk).unwrap_err().to_string();
        assert!(err.contains("corrupt IPC"), "{err}");

        let other = Schema::new(vec![arrow::datatypes::Field::new(
            "x",
            arrow::datatypes::DataType::Utf8,
            true,
        )]);
        let enc = BatchEncoder::new(Compression::None).unwrap();
        let err = dec.decode(&enc.schema(&other)).unwrap_err().to_string();
        assert!(
            err.contains("schema mismatch") && err.contains("x: Utf8"),
            "{err}"
        );

        // A batch before any schema.
        let mut enc = BatchEncoder::new(Compression::None).unwrap();
        let b = enc.encode(&make_batch(4, 1).unwrap()).unwrap();
        let err = BatchDecoder::new(None, true)
            .decode(&b)
            .unwrap_err()
            .to_string();
        assert!(err.contains("before the schema"), "{err}");
    }
}
