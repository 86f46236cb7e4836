//! mor-streamer's native Kafka reader: a librdkafka consumer whose messages go straight into
//! Arrow buffers, so reading a record costs no Python object and no call into Python.
//! `streamer.kafka.consumer.native` is its only user, and turns the buffers into record batches.

mod columns;
mod consumer;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use columns::{BinaryColumn, Bitmap, Records};
use consumer::{Consumer, KafkaError};

create_exception!(
    mor_streamer_native,
    NativeKafkaError,
    PyException,
    "A librdkafka error: args are (code, text)."
);

fn raise(e: KafkaError) -> PyErr {
    NativeKafkaError::new_err((e.code, e.text))
}

/// A librdkafka consumer reading one assigned offset range at a time into Arrow buffers.
#[pyclass(module = "mor_streamer_native")]
struct RangeConsumer {
    inner: Consumer,
}

fn bitmap<'py>(py: Python<'py>, b: &Bitmap) -> Option<Bound<'py, PyBytes>> {
    (b.nulls > 0).then(|| PyBytes::new(py, &b.bytes))
}

fn binary<'py>(py: Python<'py>, c: &BinaryColumn) -> PyResult<Bound<'py, PyTuple>> {
    let offsets: &[u8] = le_bytes_i32(&c.offsets);
    PyTuple::new(
        py,
        [
            bitmap(py, &c.validity).into_pyobject(py)?.into_any(),
            PyBytes::new(py, offsets).into_any(),
            PyBytes::new(py, &c.data).into_any(),
            c.validity.nulls.into_pyobject(py)?.into_any(),
        ],
    )
}

fn le_bytes_i32(v: &[i32]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn le_bytes_i64(v: &[i64]) -> &[u8] {
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
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
    ) -> PyResult<(usize, usize, i64, i64, bool, Vec<(i32, i64, String)>)> {
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
        let header_buffers = if headers {
            let h = &r.headers;
            PyTuple::new(
                py,
                [
                    bitmap(py, &h.validity).into_pyobject(py)?.into_any(),
                    PyBytes::new(py, le_bytes_i32(&h.list_offsets)).into_any(),
                    h.validity.nulls.into_pyobject(py)?.into_any(),
                    binary(py, &h.names)?.into_any(),
                    binary(py, &h.values)?.into_any(),
                ],
            )?
            .into_any()
        } else {
            py.None().into_bound(py)
        };
        PyTuple::new(
            py,
            [
                r.len().into_pyobject(py)?.into_any(),
                binary(py, &r.keys)?.into_any(),
                binary(py, &r.values)?.into_any(),
                PyBytes::new(py, le_bytes_i64(&r.offsets)).into_any(),
                PyBytes::new(py, le_bytes_i64(&r.timestamps)).into_any(),
                PyBytes::new(py, le_bytes_i32(&r.timestamp_types)).into_any(),
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

#[pyfunction]
fn librdkafka_version() -> String {
    consumer::librdkafka_version()
}

#[pymodule]
fn mor_streamer_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RangeConsumer>()?;
    m.add_function(wrap_pyfunction!(librdkafka_version, m)?)?;
    m.add("NativeKafkaError", m.py().get_type::<NativeKafkaError>())?;
    Ok(())
}
