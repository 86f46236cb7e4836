//! mor-streamer's native Kafka reader: a librdkafka consumer whose messages go straight into
//! Arrow buffers, so reading a record costs no Python object and no call into Python.
//! `streamer.kafka.consumer.native` turns its buffers into record batches. It also decodes JSON
//! records into Arrow columns (`JsonShape`, `decode_json`), for `streamer.decode.native_json`.

mod columns;
mod consumer;
mod json;
mod lent;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use columns::{BinaryColumn, Bitmap, Records};
use consumer::{Consumer, KafkaError};
use json::{Column, Decoder, Field, Kind};
use lent::lend;

create_exception!(
    mor_streamer_native,
    NativeKafkaError,
    PyException,
    "A librdkafka error: args are (code, text)."
);

fn raise(e: KafkaError) -> PyErr {
    NativeKafkaError::new_err((e.code, e.text))
}

/// What a fetch added: (records, value bytes, first offset seen, last offset added, whether the
/// range's end was seen, error messages as (code, offset, text)).
type Fetched = (usize, usize, i64, i64, bool, Vec<(i32, i64, String)>);

/// A librdkafka consumer reading one assigned offset range at a time into Arrow buffers.
#[pyclass(module = "mor_streamer_native")]
struct RangeConsumer {
    inner: Consumer,
}

/// A validity bitmap lent to Python, or None when nothing is null.
fn bitmap<'py>(py: Python<'py>, b: Bitmap) -> PyResult<Bound<'py, PyAny>> {
    if b.nulls > 0 {
        lend(py, b.bytes)
    } else {
        Ok(py.None().into_bound(py))
    }
}

/// A binary column as (validity or None, offsets, data, null count), its buffers lent.
fn binary<'py>(py: Python<'py>, c: BinaryColumn) -> PyResult<Bound<'py, PyTuple>> {
    let nulls = c.validity.nulls;
    PyTuple::new(
        py,
        [
            bitmap(py, c.validity)?,
            lend(py, c.offsets)?,
            lend(py, c.data)?,
            nulls.into_pyobject(py)?.into_any(),
        ],
    )
}

#[pymethods]
impl RangeConsumer {
    /// A consumer with librdkafka's `settings` (name, value pairs).
    #[new]
    fn new(settings: Vec<(String, String)>) -> PyResult<Self> {
        Ok(RangeConsumer {
            inner: Consumer::new(&settings).map_err(raise)?,
        })
    }

    fn assign(&mut self, topic: &str, partition: i32, offset: i64) -> PyResult<()> {
        self.inner.assign(topic, partition, offset).map_err(raise)
    }

    fn unassign(&mut self) -> PyResult<()> {
        self.inner.unassign().map_err(raise)
    }

    fn position(&self, topic: &str, partition: i32) -> PyResult<i64> {
        self.inner.position(topic, partition).map_err(raise)
    }

    fn watermarks(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        timeout_ms: i32,
    ) -> PyResult<(i64, i64)> {
        let inner = &self.inner;
        py.allow_threads(|| inner.watermarks(topic, partition, timeout_ms))
            .map_err(raise)
    }

    /// (topic error code, partitions) by a metadata request.
    fn topic_partitions(
        &self,
        py: Python<'_>,
        topic: &str,
        timeout_ms: i32,
    ) -> PyResult<(i32, Vec<i32>)> {
        let inner = &self.inner;
        py.allow_threads(|| inner.topic_partitions(topic, timeout_ms))
            .map_err(raise)
    }

    /// Consume up to `max_messages` messages, add those at `lo <= offset < hi` to the batch, and return
    /// (added, value bytes added, first offset seen at or after lo, last offset added, whether
    /// a record at or after hi was seen, error messages as (code, offset, text)).
    fn fetch(
        &mut self,
        py: Python<'_>,
        max_messages: usize,
        timeout_ms: i32,
        lo: i64,
        hi: i64,
        headers: bool,
    ) -> PyResult<Fetched> {
        let inner = &mut self.inner;
        let f = py
            .allow_threads(|| inner.fetch(max_messages, timeout_ms, lo, hi, headers))
            .map_err(raise)?;
        Ok((
            f.added,
            f.value_bytes,
            f.first_seen,
            f.last_added,
            f.past_end,
            f.events,
        ))
    }

    /// The batch's buffers, and a new empty batch: (rows, keys, values, offsets, timestamps,
    /// timestamp types, headers); keys, values, header names and values are (validity or None,
    /// offsets, data, null count); headers are None unless asked for, else (validity or None,
    /// list offsets, null count, names, values).
    fn flush<'py>(&mut self, py: Python<'py>, headers: bool) -> PyResult<Bound<'py, PyTuple>> {
        let r: Records = std::mem::take(&mut self.inner.records);
        self.inner.records.reserve_like(&r); // a batch like this one next: no vector regrown
        let rows = r.len();
        let header_buffers = if headers {
            let h = r.headers;
            let nulls = h.validity.nulls;
            PyTuple::new(
                py,
                [
                    bitmap(py, h.validity)?,
                    lend(py, h.list_offsets)?,
                    nulls.into_pyobject(py)?.into_any(),
                    binary(py, h.names)?.into_any(),
                    binary(py, h.values)?.into_any(),
                ],
            )?
            .into_any()
        } else {
            py.None().into_bound(py)
        };
        PyTuple::new(
            py,
            [
                rows.into_pyobject(py)?.into_any(),
                binary(py, r.keys)?.into_any(),
                binary(py, r.values)?.into_any(),
                lend(py, r.offsets)?,
                lend(py, r.timestamps)?,
                lend(py, r.timestamp_types)?,
                header_buffers,
            ],
        )
    }

    /// Error events since the last call: (code, fatal, text).
    fn drain_errors(&self) -> Vec<(i32, bool, String)> {
        self.inner.drain_errors()
    }

    /// librdkafka's log lines since the last call.
    fn drain_logs(&self) -> Vec<String> {
        self.inner.drain_logs()
    }

    fn close(&mut self, py: Python<'_>) {
        let inner = &mut self.inner;
        py.allow_threads(|| inner.close());
    }
}

/// The struct a batch of JSON records decodes into, from Python's description of it: `(kind,
/// nullable, children)` with kind one of bool, int8, int16, int32, int64, float32, float64,
/// utf8, timestamp[s|ms|us|ns], struct, and children `(name, description)` pairs of a struct;
/// a struct's field may be an `alias` of another (`json::Kind::Alias`).
#[pyclass(module = "mor_streamer_native", frozen)]
struct JsonShape {
    root: Field,
}

fn field(description: &Bound<'_, PyAny>) -> PyResult<Field> {
    let (kind, nullable, children): (String, bool, Vec<(String, Bound<'_, PyAny>)>) =
        description.extract()?;
    let kind = match kind.as_str() {
        "bool" => Kind::Bool,
        "int8" => Kind::Int(1),
        "int16" => Kind::Int(2),
        "int32" => Kind::Int(4),
        "int64" => Kind::Int(8),
        "float32" => Kind::Float32,
        "float64" => Kind::Float64,
        "utf8" => Kind::Utf8,
        "timestamp[s]" => Kind::Timestamp { digits: 0 },
        "timestamp[ms]" => Kind::Timestamp { digits: 3 },
        "timestamp[us]" => Kind::Timestamp { digits: 6 },
        "timestamp[ns]" => Kind::Timestamp { digits: 9 },
        "struct" => struct_kind(&children)?,
        "alias" => return Err(invalid("an alias is a field of a struct")),
        other => return Err(invalid(&format!("no JSON decoding into {other}"))),
    };
    Ok(Field { kind, nullable })
}

/// A struct's fields; an alias, `("alias", _, [(name of the field it aliases, _)])`, at most one.
fn struct_kind(children: &[(String, Bound<'_, PyAny>)]) -> PyResult<Kind> {
    let mut fields = Vec::with_capacity(children.len());
    for (name, child) in children {
        let (kind, _, target): (String, bool, Vec<(String, Bound<'_, PyAny>)>) = child.extract()?;
        let field = if kind == "alias" {
            let of = match target.as_slice() {
                [(target, _)] => children.iter().position(|(sibling, _)| sibling == target),
                _ => None,
            };
            let of = of.ok_or_else(|| invalid(&format!("the alias {name} names no field")))?;
            Field {
                kind: Kind::Alias { of },
                nullable: true,
            }
        } else {
            field(child)?
        };
        fields.push((name.as_bytes().to_vec(), field));
    }
    let aliases: Vec<usize> = fields
        .iter()
        .filter_map(|(_, f)| match f.kind {
            Kind::Alias { of } => Some(of),
            _ => None,
        })
        .collect();
    match aliases.as_slice() {
        [] => {}
        [of] if matches!(fields[*of].1.kind, Kind::Struct(_)) => {}
        _ => return Err(invalid("a struct has at most one alias, of a struct field")),
    }
    Ok(Kind::Struct(fields))
}

fn invalid(message: &str) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(message.to_string())
}

#[pymethods]
impl JsonShape {
    #[new]
    fn new(description: &Bound<'_, PyAny>) -> PyResult<Self> {
        let root = field(description)?;
        if !matches!(root.kind, Kind::Struct(_)) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "records decode into a struct",
            ));
        }
        Ok(JsonShape { root })
    }
}

fn bytes_of(buffer: &PyBuffer<i8>) -> &[u8] {
    // a contiguous buffer of bytes, alive as long as `buffer`
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) }
}

/// A decoded column as (validity or None, null count, buffers, children), its buffers lent.
fn column_buffers<'py>(py: Python<'py>, column: Column) -> PyResult<Bound<'py, PyTuple>> {
    let (validity, buffers, children) = match column {
        Column::Bool { validity, values } => (validity, vec![lend(py, values.bytes)?], vec![]),
        Column::Int {
            validity, values, ..
        } => (validity, vec![lend(py, values)?], vec![]),
        Column::Float32 { validity, values } => (validity, vec![lend(py, values)?], vec![]),
        Column::Float64 { validity, values } => (validity, vec![lend(py, values)?], vec![]),
        Column::Utf8(strings) => (
            strings.validity,
            vec![lend(py, strings.offsets)?, lend(py, strings.data)?],
            vec![],
        ),
        Column::Struct {
            validity, children, ..
        } => (
            validity,
            vec![],
            children
                .into_iter()
                .map(|c| column_buffers(py, c).map(Bound::into_any))
                .collect::<PyResult<Vec<_>>>()?,
        ),
    };
    let nulls = validity.nulls;
    PyTuple::new(
        py,
        [
            bitmap(py, validity)?,
            nulls.into_pyobject(py)?.into_any(),
            PyList::new(py, buffers)?.into_any(),
            PyList::new(py, children)?.into_any(),
        ],
    )
}

/// Records `[offset, offset + length)` of an Arrow binary array (its validity bitmap or None,
/// its 32-bit offsets and its data) decoded into `shape`'s struct: its column's buffers (see
/// `column_buffers`), or None when the batch is one to read with Arrow's JSON reader. Each
/// record is read without its first `front` and last `back` bytes: Connect's payload inside
/// `{"schema":...,"payload":...}`, without a copy of it.
#[pyfunction]
#[pyo3(signature = (shape, validity, offsets, data, offset, length, front=0, back=0))]
#[allow(clippy::too_many_arguments)]
fn decode_json<'py>(
    py: Python<'py>,
    shape: &JsonShape,
    validity: Option<PyBuffer<i8>>,
    offsets: PyBuffer<i8>,
    data: PyBuffer<i8>,
    offset: usize,
    length: usize,
    front: usize,
    back: usize,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let valid = validity.as_ref().map(bytes_of);
    let ends = bytes_of(&offsets);
    let text = bytes_of(&data);
    if ends.len() < (offset + length + 1) * 4 {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "the offsets end before the records",
        ));
    }
    let end_at = |i: usize| {
        i32::from_le_bytes(ends[i * 4..i * 4 + 4].try_into().expect("four bytes")) as usize
    };
    let (first, last) = (end_at(offset), end_at(offset + length));
    let trimmed = front + back > 0;
    let decoded = py.allow_threads(|| {
        // Untrimmed, the text is checked as a whole; trimmed, only what is read of each record.
        if !trimmed && std::str::from_utf8(text.get(first..last)?).is_err() {
            return None;
        }
        let mut decoder = Decoder::new(&shape.root, length, last - first);
        for row in offset..offset + length {
            let present = valid.is_none_or(|bits| bits[row / 8] & (1 << (row % 8)) != 0);
            let record = if present {
                let (start, end) = (end_at(row) + front, end_at(row + 1).checked_sub(back)?);
                let bytes = text.get(start..end)?;
                if trimmed && std::str::from_utf8(bytes).is_err() {
                    return None;
                }
                Some(bytes)
            } else {
                None
            };
            decoder.push(record).ok()?;
        }
        Some(decoder.finish())
    });
    decoded.map(|column| column_buffers(py, column)).transpose()
}

#[pyfunction]
fn librdkafka_version() -> String {
    consumer::librdkafka_version()
}

#[pymodule]
fn mor_streamer_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RangeConsumer>()?;
    m.add_function(wrap_pyfunction!(librdkafka_version, m)?)?;
    m.add_class::<JsonShape>()?;
    m.add_class::<lent::OwnedBuffer>()?;
    m.add_function(wrap_pyfunction!(decode_json, m)?)?;
    m.add("NativeKafkaError", m.py().get_type::<NativeKafkaError>())?;
    Ok(())
}
