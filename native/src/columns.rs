//! The columns of one Arrow record batch of Kafka records, filled record by record in Arrow's own
//! memory layout, so Python wraps them into arrays without looking at a record.

/// A validity bitmap: bit i set when row i is not null.
#[derive(Default)]
pub struct Bitmap {
    pub bytes: Vec<u8>,
    pub len: usize,
    pub nulls: usize,
}

impl Bitmap {
    pub fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if valid {
            *self.bytes.last_mut().expect("a byte was pushed") |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    /// Takes back the last bit pushed.
    pub fn pop(&mut self) {
        self.len -= 1;
        let (byte, bit) = (self.len / 8, self.len % 8);
        if self.bytes[byte] & (1 << bit) == 0 {
            self.nulls -= 1;
        }
        if bit == 0 {
            self.bytes.pop();
        } else {
            self.bytes[byte] &= !(1 << bit);
        }
    }
}

/// A column of Arrow `binary` (or `string`) values: 32-bit offsets, the bytes, and nulls.
pub struct BinaryColumn {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Bitmap,
}

impl Default for BinaryColumn {
    fn default() -> Self {
        BinaryColumn {
            offsets: vec![0],
            data: Vec::new(),
            validity: Bitmap::default(),
        }
    }
}

impl BinaryColumn {
    pub fn push(&mut self, value: Option<&[u8]>) {
        if let Some(bytes) = value {
            self.data.extend_from_slice(bytes);
        }
        self.validity.push(value.is_some());
        self.offsets.push(self.data.len() as i32);
    }

    /// Takes back the last value pushed.
    pub fn pop(&mut self) {
        self.offsets.pop();
        self.data
            .truncate(*self.offsets.last().expect("offsets start at 0") as usize);
        self.validity.pop();
    }
}

/// Each record's headers as Arrow `list<struct<key: string, value: binary>>`: null when a
/// record has none, as Spark's Kafka source gives them.
#[derive(Default)]
pub struct HeaderColumn {
    pub list_offsets: Vec<i32>,
    pub validity: Bitmap,
    pub names: BinaryColumn,
    pub values: BinaryColumn,
}

impl HeaderColumn {
    pub fn start_record(&mut self) {
        if self.list_offsets.is_empty() {
            self.list_offsets.push(0);
        }
    }

    pub fn push_header(&mut self, name: &[u8], value: Option<&[u8]>) {
        match std::str::from_utf8(name) {
            Ok(_) => self.names.push(Some(name)),
            Err(_) => self
                .names
                .push(Some(String::from_utf8_lossy(name).as_bytes())),
        }
        self.values.push(value);
    }

    pub fn end_record(&mut self, count: usize) {
        self.validity.push(count > 0);
        self.list_offsets
            .push((self.names.offsets.len() - 1) as i32);
    }
}

/// The records of one batch, column by column.
#[derive(Default)]
pub struct Records {
    pub keys: BinaryColumn,
    pub values: BinaryColumn,
    pub offsets: Vec<i64>,
    /// Microseconds since the epoch, as Spark's `timestamp`.
    pub timestamps: Vec<i64>,
    /// Spark's numbering: -1 not available, 0 create time, 1 log-append time.
    pub timestamp_types: Vec<i32>,
    pub headers: HeaderColumn,
}

impl Records {
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Room for a batch like `other`, so that filling it regrows (and copies) no vector.
    pub fn reserve_like(&mut self, other: &Records) {
        let rows = other.len();
        for (column, like) in [
            (&mut self.keys, &other.keys),
            (&mut self.values, &other.values),
        ] {
            column.offsets.reserve(rows);
            column.data.reserve(like.data.len());
            column.validity.bytes.reserve(like.validity.bytes.len());
        }
        self.offsets.reserve(rows);
        self.timestamps.reserve(rows);
        self.timestamp_types.reserve(rows);
    }
}
