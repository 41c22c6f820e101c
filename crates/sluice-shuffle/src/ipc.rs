//! Record batches as Arrow IPC messages carried in Arrow Flight
//! `FlightData` (header + body), one message per frame.
//!
//! A channel's first data frame is its schema; dictionaries precede the
//! batch that first uses them (and are resent when they change); every
//! other data frame is one record batch. The encoder and decoder each live
//! for one channel, so the schema crosses the wire once per channel.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::ipc::{root_as_message, MessageHeader};
use arrow::record_batch::RecordBatch;
use arrow_flight::utils::flight_data_to_arrow_batch;
use arrow_flight::FlightData;

use crate::error::{Result, ShuffleError, Violation};
use crate::proto::IpcFrame;

fn to_frame(data: FlightData) -> IpcFrame {
    IpcFrame {
        data_header: data.data_header,
        data_body: data.data_body,
    }
}

/// Encodes one channel's batches; sends the schema before the first one.
pub struct IpcEncoder {
    edge: String,
    schema: SchemaRef,
    schema_sent: bool,
    options: IpcWriteOptions,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    context: IpcWriteContext,
}

impl std::fmt::Debug for IpcEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcEncoder")
            .field("edge", &self.edge)
            .field("schema_sent", &self.schema_sent)
            .finish_non_exhaustive()
    }
}

impl IpcEncoder {
    /// An encoder for batches of `schema`.
    pub fn new(edge: &str, schema: SchemaRef) -> Self {
        Self {
            edge: edge.to_string(),
            schema,
            schema_sent: false,
            options: IpcWriteOptions::default(),
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            context: IpcWriteContext::default(),
        }
    }

    /// The frames that carry `batch`: the schema (first call only), any
    /// dictionaries, then the batch.
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<IpcFrame>> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(ShuffleError::SchemaMismatch {
                edge: self.edge.clone(),
                expected: self.schema.to_string(),
                got: batch.schema().to_string(),
            });
        }
        let mut frames = Vec::with_capacity(2);
        if !self.schema_sent {
            // Encoding the schema through the tracker assigns the
            // dictionary ids the batches' dictionaries are then sent under.
            let schema = self.generator.schema_to_bytes_with_dictionary_tracker(
                &self.schema,
                &mut self.tracker,
                &self.options,
            );
            frames.push(to_frame(schema.into()));
            self.schema_sent = true;
        }
        let (dictionaries, encoded) = self
            .generator
            .encode(batch, &mut self.tracker, &self.options, &mut self.context)
            .map_err(|source| ShuffleError::Ipc {
                edge: self.edge.clone(),
                what: "encode of a record batch",
                source,
            })?;
        frames.extend(dictionaries.into_iter().map(|d| to_frame(d.into())));
        frames.push(to_frame(encoded.into()));
        Ok(frames)
    }
}

/// Decodes one channel's frames against the edge's schema.
pub struct IpcDecoder {
    edge: String,
    sender: String,
    expected: SchemaRef,
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl IpcDecoder {
    /// A decoder for a channel of `edge` from `sender` that must carry
    /// `expected`.
    pub fn new(edge: &str, sender: &str, expected: SchemaRef) -> Self {
        Self {
            edge: edge.to_string(),
            sender: sender.to_string(),
            expected,
            schema: None,
            dictionaries: HashMap::new(),
        }
    }

    fn violation(&self, what: &'static str) -> ShuffleError {
        ShuffleError::Protocol {
            edge: self.edge.clone(),
            sender: self.sender.clone(),
            violation: Violation::SchemaOrder(what),
        }
    }

    fn ipc(&self, what: &'static str, source: arrow::error::ArrowError) -> ShuffleError {
        ShuffleError::Ipc {
            edge: self.edge.clone(),
            what,
            source,
        }
    }

    /// Decode one frame: `Some(batch)` for a record batch, `None` for the
    /// schema or a dictionary (channel state only).
    pub fn decode(&mut self, frame: IpcFrame) -> Result<Option<RecordBatch>> {
        let data = FlightData::new()
            .with_data_header(frame.data_header)
            .with_data_body(frame.data_body);
        let message = root_as_message(&data.data_header[..]).map_err(|err| {
            self.ipc(
                "decode of a message header",
                arrow::error::ArrowError::ParseError(err.to_string()),
            )
        })?;
        match message.header_type() {
            MessageHeader::Schema => {
                if self.schema.is_some() {
                    return Err(self.violation("a second schema on one channel"));
                }
                let schema = Schema::try_from(&data)
                    .map_err(|source| self.ipc("decode of a schema", source))?;
                if schema.fields() != self.expected.fields() {
                    return Err(ShuffleError::SchemaMismatch {
                        edge: self.edge.clone(),
                        expected: self.expected.to_string(),
                        got: schema.to_string(),
                    });
                }
                self.schema = Some(Arc::clone(&self.expected));
                Ok(None)
            }
            MessageHeader::DictionaryBatch => {
                let Some(schema) = &self.schema else {
                    return Err(self.violation("a dictionary before the schema"));
                };
                let Some(batch) = message.header_as_dictionary_batch() else {
                    return Err(self.violation("a dictionary message without its header"));
                };
                arrow::ipc::reader::read_dictionary(
                    &Buffer::from(data.data_body.as_ref()),
                    batch,
                    schema,
                    &mut self.dictionaries,
                    &message.version(),
                )
                .map_err(|source| self.ipc("decode of a dictionary", source))?;
                Ok(None)
            }
            MessageHeader::RecordBatch => {
                let Some(schema) = &self.schema else {
                    return Err(self.violation("a record batch before the schema"));
                };
                flight_data_to_arrow_batch(&data, Arc::clone(schema), &self.dictionaries)
                    .map(Some)
                    .map_err(|source| self.ipc("decode of a record batch", source))
            }
            _ => Err(self.violation("an IPC message that is not a schema, dictionary or batch")),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arrow::array::{ArrayAccessor, DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Int32Type};

    use super::*;

    #[test]
    fn round_trips_batches_with_dictionaries_and_sends_schema_once() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
        ]));
        let make = |keys: Vec<i64>, words: Vec<&str>| {
            let dict: DictionaryArray<Int32Type> = words.into_iter().collect();
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int64Array::from(keys)), Arc::new(dict)],
            )
            .unwrap()
        };
        let b1 = make(vec![1, 2], vec!["x", "y"]);
        let b2 = make(vec![3], vec!["z"]);
        let mut enc = IpcEncoder::new("e", Arc::clone(&schema));
        let f1 = enc.encode(&b1).unwrap();
        let f2 = enc.encode(&b2).unwrap();
        // schema + dictionary + batch, then (new dictionary) + batch.
        assert_eq!(f1.len(), 3);
        assert_eq!(f2.len(), 2);
        let mut dec = IpcDecoder::new("e", "n", Arc::clone(&schema));
        let out: Vec<RecordBatch> = f1
            .into_iter()
            .chain(f2)
            .filter_map(|f| dec.decode(f).unwrap())
            .collect();
        assert_eq!(out, vec![b1, b2]);
        let words = out[1]
            .column(1)
            .as_any()
            .downcast_ref::<DictionaryArray<Int32Type>>()
            .unwrap()
            .downcast_dict::<StringArray>()
            .unwrap()
            .value(0)
            .to_string();
        assert_eq!(words, "z");
    }

    #[test]
    fn refuses_batch_before_schema_and_foreign_schema() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        let mut frames = IpcEncoder::new("e", Arc::clone(&schema))
            .encode(&batch)
            .unwrap();
        let mut dec = IpcDecoder::new("e", "n", Arc::clone(&schema));
        let err = dec.decode(frames.remove(1)).unwrap_err();
        assert!(
            err.to_string().contains("a record batch before the schema"),
            "{err}"
        );

        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, false)]));
        let mut dec = IpcDecoder::new("e", "n", other);
        let err = dec.decode(frames.remove(0)).unwrap_err();
        assert_eq!(err.code(), "SLC-SHF-004");
    }
}
