//! JSON objects decoded straight into the Arrow columns of a struct, one pass over each record's
//! bytes, members mapped to fields by name and the others skipped.
//!
//! The decoder only takes what it is sure Arrow's own JSON reader reads the same way: a record
//! that is not a JSON object, a value of another JSON kind than its field's, a number out of its
//! field's range, a member named twice, a null in a field that cannot be null, text that is not
//! UTF-8... make the whole batch `Undecided`, and the caller reads it with Arrow's reader, which
//! also says what is wrong with which record.

use crate::columns::{BinaryColumn, Bitmap};

/// A field's type, as far as this decoder reads it.
pub enum Kind {
    Bool,
    /// A signed integer of this many bytes.
    Int(u8),
    Float32,
    Float64,
    Utf8,
    /// A timestamp from ISO 8601 text, in units of a second's 10^-`digits` (at most `digits`
    /// fractional digits written).
    Timestamp {
        digits: u32,
    },
    /// Fields by name.
    Struct(Vec<(Vec<u8>, Field)>),
    /// A struct's member read into the column of its sibling field `of` (a struct) when that
    /// field's own member is null or absent: Debezium's `before`, read into `after`'s columns.
    /// Its own column is an `int8` of the pair's members read non-null (`ALIAS_READ`,
    /// `TARGET_READ`). A struct has at most one.
    Alias {
        of: usize,
    },
}

/// An alias's bit: its own member was read, not null.
pub const ALIAS_READ: u8 = 1;
/// An alias's bit: the member of the field it aliases was read, not null; its value is the one kept.
pub const TARGET_READ: u8 = 2;

pub struct Field {
    pub kind: Kind,
    pub nullable: bool,
}

/// The batch is not one this decoder reads exactly as Arrow's JSON reader does.
#[derive(Debug)]
pub struct Undecided;

type Outcome<T> = Result<T, Undecided>;

/// A decoded column in Arrow's layout; children of a struct in its fields' order.
pub enum Column {
    Bool {
        validity: Bitmap,
        values: Bitmap,
    },
    Int {
        validity: Bitmap,
        width: u8,
        values: Vec<u8>,
    },
    Float32 {
        validity: Bitmap,
        values: Vec<f32>,
    },
    Float64 {
        validity: Bitmap,
        values: Vec<f64>,
    },
    Utf8(BinaryColumn),
    Struct {
        validity: Bitmap,
        children: Vec<Column>,
        /// Per field, the number of the last object it was seen in: a member named twice.
        seen: Vec<u64>,
        objects: u64,
        /// Its alias field, if any, and the field it aliases.
        shared: Option<(usize, usize)>,
    },
}

impl Column {
    fn new(kind: &Kind) -> Column {
        match kind {
            Kind::Bool => Column::Bool {
                validity: Bitmap::default(),
                values: Bitmap::default(),
            },
            Kind::Timestamp { .. } => Column::Int {
                validity: Bitmap::default(),
                width: 8,
                values: Vec::new(),
            },
            Kind::Int(width) => Column::Int {
                validity: Bitmap::default(),
                width: *width,
                values: Vec::new(),
            },
            Kind::Float32 => Column::Float32 {
                validity: Bitmap::default(),
                values: Vec::new(),
            },
            Kind::Float64 => Column::Float64 {
                validity: Bitmap::default(),
                values: Vec::new(),
            },
            Kind::Utf8 => Column::Utf8(BinaryColumn::default()),
            Kind::Alias { .. } => Column::Int {
                validity: Bitmap::default(),
                width: 1,
                values: Vec::new(),
            },
            Kind::Struct(fields) => Column::Struct {
                validity: Bitmap::default(),
                children: fields.iter().map(|(_, f)| Column::new(&f.kind)).collect(),
                seen: vec![0; fields.len()],
                objects: 0,
                shared: fields
                    .iter()
                    .enumerate()
                    .find_map(|(i, (_, f))| match f.kind {
                        Kind::Alias { of } => Some((i, of)),
                        _ => None,
                    }),
            },
        }
    }

    /// Room for `rows` values, strings taking at most `bytes`: a string column reserves room
    /// for short strings only and grows past it, as a batch's columns hold a fraction of its
    /// bytes (Connect's schemas, Debezium's `source`, are read past).
    fn reserve(&mut self, rows: usize, bytes: usize) {
        match self {
            Column::Int { values, width, .. } => values.reserve(rows * *width as usize),
            Column::Float32 { values, .. } => values.reserve(rows),
            Column::Float64 { values, .. } => values.reserve(rows),
            Column::Utf8(strings) => {
                strings.offsets.reserve(rows);
                strings.data.reserve((bytes / 4).min(rows * SHORT_STRING));
            }
            Column::Struct { children, .. } => {
                children.iter_mut().for_each(|c| c.reserve(rows, bytes))
            }
            Column::Bool { .. } => {}
        }
    }

    /// Takes back the last value pushed: an alias's value giving way to its target's.
    fn pop(&mut self) {
        match self {
            Column::Bool { validity, values } => {
                validity.pop();
                values.pop();
            }
            Column::Int {
                validity,
                width,
                values,
            } => {
                validity.pop();
                values.truncate(values.len() - *width as usize);
            }
            Column::Float32 { validity, values } => {
                validity.pop();
                values.pop();
            }
            Column::Float64 { validity, values } => {
                validity.pop();
                values.pop();
            }
            Column::Utf8(column) => column.pop(),
            Column::Struct {
                validity, children, ..
            } => {
                validity.pop();
                children.iter_mut().for_each(Column::pop);
            }
        }
    }

    /// A null here: its children, if any, get nulls too.
    fn push_null(&mut self) {
        match self {
            Column::Bool { validity, values } => {
                validity.push(false);
                values.push(false);
            }
            Column::Int {
                validity,
                width,
                values,
            } => {
                validity.push(false);
                values.extend(std::iter::repeat_n(0, *width as usize));
            }
            Column::Float32 { validity, values } => {
                validity.push(false);
                values.push(0.0);
            }
            Column::Float64 { validity, values } => {
                validity.push(false);
                values.push(0.0);
            }
            Column::Utf8(column) => column.push(None),
            Column::Struct {
                validity, children, ..
            } => {
                validity.push(false);
                children.iter_mut().for_each(Column::push_null);
            }
        }
    }
}

/// Decodes records (JSON objects) into a struct column of `shape`, which must be a struct.
pub struct Decoder<'a> {
    shape: &'a Field,
    column: Column,
}

impl<'a> Decoder<'a> {
    /// For `rows` records of `bytes` bytes in all.
    pub fn new(shape: &'a Field, rows: usize, bytes: usize) -> Decoder<'a> {
        let mut column = Column::new(&shape.kind);
        column.reserve(rows, bytes);
        Decoder { shape, column }
    }

    /// One record: None (a null record) or its bytes. The caller checks that the batch's text
    /// is UTF-8 as a whole: a record starts and ends with ASCII (its braces), so it is UTF-8 too.
    pub fn push(&mut self, record: Option<&[u8]>) -> Outcome<()> {
        let Some(bytes) = record else {
            self.column.push_null();
            return Ok(());
        };
        let mut text = Text { bytes, at: 0 };
        text.skip_space();
        if text.peek() != Some(b'{') {
            return Err(Undecided);
        }
        text.value(&self.shape.kind, &mut self.column, 0)?;
        text.skip_space();
        if text.at != bytes.len() {
            return Err(Undecided);
        }
        Ok(())
    }

    pub fn finish(self) -> Column {
        self.column
    }
}

/// The bytes a string's plain run stops at: its closing quote, an escape, a control character.
const STRING_STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        stops[b] = true;
        b += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// How many bytes from `bytes`' start precede the first `STRING_STOPS` byte (all of them if none):
/// eight at a time while no byte of them is one.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // the high bit of each byte that is zero (of those under 0x20); exact for the lowest one
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let quote = zero(word ^ (ONES * u64::from(b'"')));
        let escape = zero(word ^ (ONES * u64::from(b'\\')));
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let stops = quote | escape | control;
        if stops != 0 {
            return at + (stops.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| STRING_STOPS[b as usize])
        .unwrap_or(bytes.len() - at)
}

/// The bytes a string column reserves per row: about a short name's or an identifier's.
const SHORT_STRING: usize = 16;

/// Deeper than this, a record is left to Arrow's reader.
const MAX_DEPTH: usize = 64;

/// A number's text as `str`: `Text::number` takes only ASCII digits, signs, '.' and exponents.
fn ascii(number: &[u8]) -> &str {
    debug_assert!(number.is_ascii());
    // SAFETY: ASCII is UTF-8
    unsafe { std::str::from_utf8_unchecked(number) }
}

/// Two short names alike, without a call to `memcmp`.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `YYYY-MM-DD`, then optionally `T` or a space and `hh:mm`, `:ss` and `.` and fractional
/// digits, then optionally `Z`: the ISO 8601 forms Arrow's reader takes that this one reads too
/// (offsets from UTC are left to Arrow's), in units of a second's 10^-`digits`.
fn timestamp(text: &[u8], digits: u32) -> Outcome<i64> {
    let zoned = text.strip_suffix(b"Z");
    let text = zoned.unwrap_or(text);
    if zoned.is_some() && text.len() <= 10 {
        return Err(Undecided); // a zone without a time of day
    }
    let number = |range: std::ops::Range<usize>| -> Outcome<i64> {
        let part = text.get(range).ok_or(Undecided)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(Undecided);
        }
        Ok(part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let separator = |at: usize, byte: u8| {
        if text.get(at) == Some(&byte) {
            Ok(())
        } else {
            Err(Undecided)
        }
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    separator(4, b'-')?;
    separator(7, b'-')?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(Undecided);
    }
    let mut seconds = days_from_civil(year, month, day) * 86_400;
    let mut fraction = 0;
    if text.len() > 10 {
        if !matches!(text[10], b'T' | b' ') {
            return Err(Undecided);
        }
        let (hour, minute) = (number(11..13)?, number(14..16)?);
        separator(13, b':')?;
        let mut second = 0;
        if text.len() > 16 {
            separator(16, b':')?;
            second = number(17..19)?;
            if text.len() > 19 {
                separator(19, b'.')?;
                let written = (text.len() - 20) as u32;
                if written == 0 || written > digits {
                    return Err(Undecided);
                }
                fraction = number(20..text.len())? * 10i64.pow(digits - written);
            }
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err(Undecided);
        }
        seconds += hour * 3600 + minute * 60 + second;
    }
    seconds
        .checked_mul(10i64.pow(digits))
        .and_then(|units| units.checked_add(fraction))
        .ok_or(Undecided)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// An integer's text (an optional minus, digits) as a number, if it fits 64 bits.
fn integer(text: &[u8]) -> Outcome<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, text),
    };
    let mut magnitude: u64 = 0;
    for &d in digits {
        magnitude = magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(d - b'0')))
            .ok_or(Undecided)?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude).ok_or(Undecided)
    } else {
        i64::try_from(magnitude).map_err(|_| Undecided)
    }
}

struct Text<'t> {
    bytes: &'t [u8],
    at: usize,
}

impl<'t> Text<'t> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Outcome<()> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(Undecided)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Outcome<()> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Undecided)
        }
    }

    /// A value of `kind` into `column`, the text at its first byte.
    fn value(&mut self, kind: &Kind, column: &mut Column, depth: usize) -> Outcome<()> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            column.push_null();
            return Ok(());
        }
        match (kind, column) {
            (Kind::Bool, Column::Bool { validity, values }) => {
                let value = match self.peek() {
                    Some(b't') => self.literal(b"true").map(|_| true)?,
                    Some(b'f') => self.literal(b"false").map(|_| false)?,
                    _ => return Err(Undecided),
                };
                validity.push(true);
                values.push(value);
            }
            (
                Kind::Int(_),
                Column::Int {
                    validity,
                    width,
                    values,
                },
            ) => {
                let number = self.number()?;
                if number.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                    return Err(Undecided);
                }
                let parsed = integer(number)?;
                let bytes = parsed.to_le_bytes();
                let width = *width as usize;
                let fits = match width {
                    1 => i8::try_from(parsed).is_ok(),
                    2 => i16::try_from(parsed).is_ok(),
                    4 => i32::try_from(parsed).is_ok(),
                    _ => true,
                };
                if !fits {
                    return Err(Undecided);
                }
                validity.push(true);
                values.extend_from_slice(&bytes[..width]);
            }
            (Kind::Float32, Column::Float32 { validity, values }) => {
                let number = self.number()?;
                let parsed: f32 = ascii(number).parse().map_err(|_| Undecided)?;
                if !parsed.is_finite() {
                    return Err(Undecided);
                }
                validity.push(true);
                values.push(parsed);
            }
            (Kind::Float64, Column::Float64 { validity, values }) => {
                let number = self.number()?;
                let parsed: f64 = ascii(number).parse().map_err(|_| Undecided)?;
                if !parsed.is_finite() {
                    return Err(Undecided);
                }
                validity.push(true);
                values.push(parsed);
            }
            (
                Kind::Timestamp { digits },
                Column::Int {
                    validity, values, ..
                },
            ) => {
                self.expect(b'"')?;
                let start = self.at;
                self.at += plain_run(&self.bytes[start..]);
                let text = &self.bytes[start..self.at];
                self.expect(b'"')?;
                let at = timestamp(text, *digits)?;
                validity.push(true);
                values.extend_from_slice(&at.to_le_bytes());
            }
            (Kind::Utf8, Column::Utf8(strings)) => {
                self.expect(b'"')?;
                self.string_into(&mut strings.data)?;
                strings.validity.push(true);
                strings
                    .offsets
                    .push(i32::try_from(strings.data.len()).map_err(|_| Undecided)?);
            }
            (
                Kind::Struct(fields),
                Column::Struct {
                    validity,
                    children,
                    seen,
                    objects,
                    shared,
                },
            ) => {
                if depth >= MAX_DEPTH {
                    return Err(Undecided);
                }
                self.expect(b'{')?;
                *objects += 1;
                let object = *objects;
                let shared = *shared;
                let mut filled = 0;
                let mut read = 0; // the shared pair's members read, not null
                let mut expected = 0; // members mostly come in the fields' order
                self.items(b'}', |text| {
                    text.expect(b'"')?;
                    let name = text.plain_name()?;
                    text.colon()?;
                    let next = fields
                        .get(expected)
                        .filter(|(field, _)| same(field, name))
                        .map(|_| expected);
                    let Some(i) =
                        next.or_else(|| fields.iter().position(|(field, _)| same(field, name)))
                    else {
                        return text.skip_value(depth + 1);
                    };
                    expected = i + 1;
                    if seen[i] == object {
                        return Err(Undecided);
                    }
                    seen[i] = object;
                    filled += 1;
                    if let Some((alias, target)) = shared.filter(|(a, t)| i == *a || i == *t) {
                        let bit = if i == alias { ALIAS_READ } else { TARGET_READ };
                        let kind = &fields[target].1.kind;
                        return text.shared(kind, &mut children[target], bit, &mut read, depth + 1);
                    }
                    let field = &fields[i].1;
                    if !field.nullable && text.peek() == Some(b'n') {
                        return Err(Undecided);
                    }
                    text.value(&field.kind, &mut children[i], depth + 1)
                })?;
                if let Some((alias, target)) = shared {
                    if read == 0 {
                        children[target].push_null();
                    }
                    let Column::Int {
                        validity, values, ..
                    } = &mut children[alias]
                    else {
                        unreachable!("an alias's column is an int8")
                    };
                    validity.push(true);
                    values.push(read);
                }
                if filled < fields.len() {
                    for (i, (_, field)) in fields.iter().enumerate() {
                        let pair = shared.is_some_and(|(a, t)| i == a || i == t);
                        if seen[i] != object && !pair {
                            if !field.nullable {
                                return Err(Undecided);
                            }
                            children[i].push_null();
                        }
                    }
                }
                validity.push(true);
            }
            _ => unreachable!("a column is made for its kind"),
        }
        Ok(())
    }

    /// A member of a struct's alias pair (`bit` says which), into the column they share: the
    /// aliased field's own value, when not null, is the one kept, whichever comes first.
    fn shared(
        &mut self,
        kind: &Kind,
        column: &mut Column,
        bit: u8,
        read: &mut u8,
        depth: usize,
    ) -> Outcome<()> {
        if self.peek() == Some(b'n') {
            return self.literal(b"null");
        }
        if *read != 0 {
            if bit == ALIAS_READ {
                *read |= bit;
                return self.skip_value(depth);
            }
            column.pop();
        }
        *read |= bit;
        self.value(kind, column, depth)
    }

    /// The items of an object or array up to its `close`, after its opening bracket, each read by
    /// `item` (at its first byte), separated by commas.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> Outcome<()>) -> Outcome<()> {
        self.skip_space();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.skip_space();
            item(self)?;
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b) if b == close => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(Undecided),
            }
        }
    }

    /// The colon between a member's name and its value, and the space around it.
    fn colon(&mut self) -> Outcome<()> {
        self.skip_space();
        self.expect(b':')?;
        self.skip_space();
        Ok(())
    }

    /// A member's name, after its opening quote; one with escapes is left to Arrow's reader.
    fn plain_name(&mut self) -> Outcome<&'t [u8]> {
        let start = self.at;
        self.at += plain_run(&self.bytes[start..]);
        self.expect(b'"')?;
        Ok(&self.bytes[start..self.at - 1])
    }

    /// A string's text, unescaped, after its opening quote.
    fn string_into(&mut self, out: &mut Vec<u8>) -> Outcome<()> {
        loop {
            let start = self.at;
            self.at += plain_run(&self.bytes[start..]);
            out.extend_from_slice(&self.bytes[start..self.at]);
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.at += 1;
                    let plain = self.escape()?;
                    out.extend_from_slice(plain.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => return Err(Undecided),
            }
        }
    }

    /// The character an escape stands for, after its backslash.
    fn escape(&mut self) -> Outcome<char> {
        let escaped = self.peek().ok_or(Undecided)?;
        self.at += 1;
        Ok(match escaped {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => self.unicode_escape()?,
            _ => return Err(Undecided),
        })
    }

    /// The character of `\uXXXX` (after its `\u`), or of a surrogate pair of two.
    fn unicode_escape(&mut self) -> Outcome<char> {
        let high = self.hex4()?;
        if !(0xD800..0xE000).contains(&high) {
            return char::from_u32(high).ok_or(Undecided);
        }
        if high >= 0xDC00 {
            return Err(Undecided);
        }
        self.literal(b"\\u")?;
        let low = self.hex4()?;
        if !(0xDC00..0xE000).contains(&low) {
            return Err(Undecided);
        }
        char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).ok_or(Undecided)
    }

    fn hex4(&mut self) -> Outcome<u32> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or(Undecided)?;
        let text = std::str::from_utf8(digits).map_err(|_| Undecided)?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Undecided);
        }
        self.at += 4;
        u32::from_str_radix(text, 16).map_err(|_| Undecided)
    }

    /// A number's text, checked against JSON's grammar.
    fn number(&mut self) -> Outcome<&'t [u8]> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Undecided),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Ok(&self.bytes[start..self.at])
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Outcome<()> {
        let start = self.at;
        self.digits();
        if self.at == start {
            Err(Undecided)
        } else {
            Ok(())
        }
    }

    /// A value no field asks for, checked but not kept.
    fn skip_value(&mut self, depth: usize) -> Outcome<()> {
        if depth >= MAX_DEPTH {
            return Err(Undecided);
        }
        match self.peek().ok_or(Undecided)? {
            b'"' => {
                self.at += 1;
                self.skip_string()
            }
            b'{' => {
                self.at += 1;
                self.items(b'}', |text| {
                    text.expect(b'"')?;
                    text.skip_string()?;
                    text.colon()?;
                    text.skip_value(depth + 1)
                })
            }
            b'[' => {
                self.at += 1;
                self.items(b']', |text| text.skip_value(depth + 1))
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(|_| ()),
        }
    }

    /// A string, after its opening quote, checked but not kept.
    fn skip_string(&mut self) -> Outcome<()> {
        loop {
            let start = self.at;
            self.at += plain_run(&self.bytes[start..]);
            match self.peek().ok_or(Undecided)? {
                b'"' => {
                    self.at += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.at += 1;
                    self.escape()?;
                }
                _ => return Err(Undecided), // a control character
            }
        }
    }
}
