//! One librdkafka consumer that reads assigned partitions in batches of messages, keeping the
//! records of an offset range in `Records` and its error events for the caller.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

use rdkafka_sys::bindings as rd;
use rdkafka_sys::types::RDKafkaRespErr as Err;

use crate::columns::Records;

/// How many of librdkafka's log lines a consumer keeps until they are drained.
const KEPT_LOG_LINES: usize = 256;

/// A librdkafka error: its code (as `confluent_kafka.KafkaError` numbers them) and text.
#[derive(Debug)]
pub struct KafkaError {
    pub code: i32,
    pub text: String,
}

impl KafkaError {
    fn new(code: Err, detail: &str) -> Self {
        let name = unsafe { CStr::from_ptr(rd::rd_kafka_err2str(code)) }.to_string_lossy();
        let text = if detail.is_empty() {
            name.into_owned()
        } else {
            format!("{detail}: {name}")
        };
        KafkaError {
            code: code as i32,
            text,
        }
    }
}

/// An error event of the client (`error_cb`): code, whether fatal, text.
pub type ErrorEvent = (i32, bool, String);

/// What librdkafka hands its callbacks, on its own threads or the consuming one.
#[derive(Default)]
struct Shared {
    errors: Mutex<Vec<ErrorEvent>>,
    logs: Mutex<VecDeque<String>>,
}

unsafe extern "C" fn on_error(
    rk: *mut rd::rd_kafka_t,
    err: c_int,
    reason: *const c_char,
    opaque: *mut c_void,
) {
    let shared = &*(opaque as *const Shared);
    let mut text = CStr::from_ptr(reason).to_string_lossy().into_owned();
    let fatal = err == Err::RD_KAFKA_RESP_ERR__FATAL as c_int;
    let mut code = err;
    if fatal {
        let mut buf = vec![0 as c_char; 512];
        let underlying = rd::rd_kafka_fatal_error(rk, buf.as_mut_ptr(), buf.len());
        code = underlying as c_int;
        text = CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
    }
    if let Ok(mut errors) = shared.errors.lock() {
        errors.push((code, fatal, text));
    }
}

unsafe extern "C" fn on_log(
    rk: *const rd::rd_kafka_t,
    level: c_int,
    facility: *const c_char,
    line: *const c_char,
) {
    let opaque = rd::rd_kafka_opaque(rk);
    if opaque.is_null() {
        return;
    }
    let shared = &*(opaque as *const Shared);
    let line = format!(
        "{} [{}] {}",
        level,
        CStr::from_ptr(facility).to_string_lossy(),
        CStr::from_ptr(line).to_string_lossy()
    );
    if let Ok(mut logs) = shared.logs.lock() {
        if logs.len() == KEPT_LOG_LINES {
            logs.pop_front();
        }
        logs.push_back(line);
    }
}

/// What one `fetch` found.
#[derive(Default)]
pub struct Fetched {
    /// Records added to the batch (those with `lo <= offset < hi`).
    pub added: usize,
    /// Bytes of values added.
    pub value_bytes: usize,
    /// The first offset at or after `lo` among the messages, added or not; -1 when none.
    pub first_seen: i64,
    /// The last offset added; -1 when none.
    pub last_added: i64,
    /// Whether a record at or after `hi` was seen.
    pub past_end: bool,
    /// Error messages of the consumed batch (end of partition, offset out of range, ...):
    /// code, offset, text.
    pub events: Vec<(i32, i64, String)>,
}

pub struct Consumer {
    rk: *mut rd::rd_kafka_t,
    queue: *mut rd::rd_kafka_queue_t,
    shared: Box<Shared>,
    messages: Vec<*mut rd::rd_kafka_message_t>,
    pub records: Records,
}

// librdkafka's handles are thread-safe; Python hands a consumer from thread to thread, one at a time.
unsafe impl Send for Consumer {}
unsafe impl Sync for Consumer {}

fn c_string(what: &str, s: &str) -> Result<CString, KafkaError> {
    CString::new(s).map_err(|_| KafkaError {
        code: Err::RD_KAFKA_RESP_ERR__INVALID_ARG as i32,
        text: format!("{what} contains a NUL byte"),
    })
}

impl Consumer {
    pub fn new(config: &[(String, String)]) -> Result<Consumer, KafkaError> {
        let shared = Box::new(Shared::default());
        unsafe {
            let conf = rd::rd_kafka_conf_new();
            let mut errstr = vec![0 as c_char; 512];
            for (name, value) in config {
                let (n, v) = (
                    c_string("a setting's name", name)?,
                    c_string("a setting's value", value)?,
                );
                let res = rd::rd_kafka_conf_set(
                    conf,
                    n.as_ptr(),
                    v.as_ptr(),
                    errstr.as_mut_ptr(),
                    errstr.len(),
                );
                if res != rd::rd_kafka_conf_res_t::RD_KAFKA_CONF_OK {
                    rd::rd_kafka_conf_destroy(conf);
                    return Err(invalid_configuration(&errstr));
                }
            }
            rd::rd_kafka_conf_set_opaque(conf, &*shared as *const Shared as *mut c_void);
            rd::rd_kafka_conf_set_error_cb(conf, Some(on_error));
            rd::rd_kafka_conf_set_log_cb(conf, Some(on_log));
            let rk = rd::rd_kafka_new(
                rd::rd_kafka_type_t::RD_KAFKA_CONSUMER,
                conf,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
            if rk.is_null() {
                // rd_kafka_new frees the configuration only when it succeeds
                rd::rd_kafka_conf_destroy(conf);
                return Err(invalid_configuration(&errstr));
            }
            // Error events are served by the consuming thread, with the messages.
            rd::rd_kafka_poll_set_consumer(rk);
            let queue = rd::rd_kafka_queue_get_consumer(rk);
            Ok(Consumer {
                rk,
                queue,
                shared,
                messages: Vec::new(),
                records: Records::default(),
            })
        }
    }

    fn partition_list(
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<*mut rd::rd_kafka_topic_partition_list_t, KafkaError> {
        let t = c_string("the topic", topic)?;
        unsafe {
            let list = rd::rd_kafka_topic_partition_list_new(1);
            let tp = rd::rd_kafka_topic_partition_list_add(list, t.as_ptr(), partition);
            (*tp).offset = offset;
            Ok(list)
        }
    }

    /// Read `partition` of `topic` from `offset` on, and nothing else.
    pub fn assign(&mut self, topic: &str, partition: i32, offset: i64) -> Result<(), KafkaError> {
        let list = Self::partition_list(topic, partition, offset)?;
        let err = unsafe {
            let err = rd::rd_kafka_assign(self.rk, list);
            rd::rd_kafka_topic_partition_list_destroy(list);
            err
        };
        check(err, "assign")
    }

    pub fn unassign(&mut self) -> Result<(), KafkaError> {
        check(
            unsafe { rd::rd_kafka_assign(self.rk, ptr::null()) },
            "unassign",
        )
    }

    /// The consumer's position in the partition: the offset of the next message it hands out.
    pub fn position(&self, topic: &str, partition: i32) -> Result<i64, KafkaError> {
        let list = Self::partition_list(topic, partition, rd::RD_KAFKA_OFFSET_INVALID as i64)?;
        unsafe {
            let err = rd::rd_kafka_position(self.rk, list);
            let offset = (*(*list).elems).offset;
            rd::rd_kafka_topic_partition_list_destroy(list);
            check(err, "position")?;
            Ok(offset)
        }
    }

    /// The partition's earliest and next offsets, asked of its leader.
    pub fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout_ms: i32,
    ) -> Result<(i64, i64), KafkaError> {
        let t = c_string("the topic", topic)?;
        let (mut low, mut high) = (0i64, 0i64);
        let err = unsafe {
            rd::rd_kafka_query_watermark_offsets(
                self.rk,
                t.as_ptr(),
                partition,
                &mut low,
                &mut high,
                timeout_ms,
            )
        };
        check(err, "watermarks")?;
        Ok((low, high))
    }

    /// The topic's error code (0 when none) and partitions, by a metadata request.
    pub fn topic_partitions(
        &self,
        topic: &str,
        timeout_ms: i32,
    ) -> Result<(i32, Vec<i32>), KafkaError> {
        let t = c_string("the topic", topic)?;
        unsafe {
            let rkt = rd::rd_kafka_topic_new(self.rk, t.as_ptr(), ptr::null_mut());
            if rkt.is_null() {
                return Err(KafkaError::new(rd::rd_kafka_last_error(), "topic"));
            }
            let mut metadata: *const rd::rd_kafka_metadata = ptr::null();
            let err = rd::rd_kafka_metadata(self.rk, 0, rkt, &mut metadata, timeout_ms);
            rd::rd_kafka_topic_destroy(rkt);
            check(err, "metadata")?;
            let md = &*metadata;
            let mut found = (
                Err::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART as i32,
                Vec::new(),
            );
            for i in 0..md.topic_cnt as isize {
                let tm = &*md.topics.offset(i);
                if CStr::from_ptr(tm.topic).to_bytes() == topic.as_bytes() {
                    let parts = (0..tm.partition_cnt as isize)
                        .map(|j| (*tm.partitions.offset(j)).id)
                        .collect();
                    found = (tm.err as i32, parts);
                }
            }
            rd::rd_kafka_metadata_destroy(metadata);
            Ok(found)
        }
    }

    /// Consume up to `max` messages, waiting at most `timeout_ms` for the first, and add those
    /// at `lo <= offset < hi` to the batch.
    pub fn fetch(
        &mut self,
        max: usize,
        timeout_ms: i32,
        lo: i64,
        hi: i64,
        headers: bool,
    ) -> Result<Fetched, KafkaError> {
        self.messages.resize(max.max(1), ptr::null_mut());
        let n = unsafe {
            rd::rd_kafka_consume_batch_queue(
                self.queue,
                timeout_ms,
                self.messages.as_mut_ptr(),
                self.messages.len(),
            )
        };
        if n < 0 {
            return Err(KafkaError::new(
                unsafe { rd::rd_kafka_last_error() },
                "consume",
            ));
        }
        let mut fetched = Fetched {
            first_seen: -1,
            last_added: -1,
            ..Fetched::default()
        };
        for i in 0..n as usize {
            let msg = self.messages[i];
            unsafe {
                self.take(&*msg, lo, hi, headers, &mut fetched);
                rd::rd_kafka_message_destroy(msg);
            }
        }
        Ok(fetched)
    }

    unsafe fn take(
        &mut self,
        m: &rd::rd_kafka_message_t,
        lo: i64,
        hi: i64,
        headers: bool,
        fetched: &mut Fetched,
    ) {
        if m.err != Err::RD_KAFKA_RESP_ERR_NO_ERROR {
            let detail = bytes(m.payload, m.len)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            let text = KafkaError::new(m.err, &detail).text;
            fetched.events.push((m.err as i32, m.offset, text));
            return;
        }
        let offset = m.offset;
        if offset < lo {
            return;
        }
        if fetched.first_seen < 0 {
            fetched.first_seen = offset;
        }
        if offset >= hi {
            fetched.past_end = true;
            return;
        }
        let value = bytes(m.payload, m.len);
        let r = &mut self.records;
        r.keys.push(bytes(m.key, m.key_len));
        r.values.push(value);
        r.offsets.push(offset);
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        let ms = rd::rd_kafka_message_timestamp(m, &mut kind);
        r.timestamps.push(ms * 1000);
        r.timestamp_types.push(kind as i32 - 1);
        if headers {
            r.headers.start_record();
            let mut hdrs: *mut rd::rd_kafka_headers_t = ptr::null_mut();
            let mut count = 0;
            if rd::rd_kafka_message_headers(m, &mut hdrs) == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
                let (mut name, mut val, mut size) = (ptr::null(), ptr::null(), 0usize);
                while rd::rd_kafka_header_get_all(hdrs, count, &mut name, &mut val, &mut size)
                    == Err::RD_KAFKA_RESP_ERR_NO_ERROR
                {
                    r.headers.push_header(
                        CStr::from_ptr(name).to_bytes(),
                        bytes(val as *mut c_void, size),
                    );
                    count += 1;
                }
            }
            r.headers.end_record(count);
        }
        fetched.added += 1;
        fetched.value_bytes += value.map_or(0, <[u8]>::len);
        fetched.last_added = offset;
    }

    pub fn drain_errors(&self) -> Vec<ErrorEvent> {
        self.shared
            .errors
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }

    pub fn drain_logs(&self) -> Vec<String> {
        self.shared
            .logs
            .lock()
            .map(|mut l| l.drain(..).collect())
            .unwrap_or_default()
    }

    pub fn close(&mut self) {
        if self.rk.is_null() {
            return;
        }
        unsafe {
            rd::rd_kafka_consumer_close(self.rk);
            rd::rd_kafka_queue_destroy(self.queue);
            rd::rd_kafka_destroy(self.rk);
        }
        self.rk = ptr::null_mut();
        self.queue = ptr::null_mut();
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.close();
    }
}

/// The configuration error librdkafka wrote into `errstr`.
fn invalid_configuration(errstr: &[c_char]) -> KafkaError {
    let text = unsafe { CStr::from_ptr(errstr.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    KafkaError {
        code: Err::RD_KAFKA_RESP_ERR__INVALID_ARG as i32,
        text,
    }
}

fn check(err: Err, what: &str) -> Result<(), KafkaError> {
    if err == Err::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::new(err, what))
    }
}

unsafe fn bytes<'a>(p: *mut c_void, len: usize) -> Option<&'a [u8]> {
    if p.is_null() {
        None
    } else {
        Some(std::slice::from_raw_parts(p as *const u8, len))
    }
}

pub fn librdkafka_version() -> String {
    unsafe { CStr::from_ptr(rd::rd_kafka_version_str()) }
        .to_string_lossy()
        .into_owned()
}
