//! Compact JSON for what the agent sends on every model call: request bodies and
//! transcript records, with the same bytes `serde_json::to_vec` writes.
//!
//! Why our own: a request repeats the system prompt, the tool schemas and the whole
//! history on every round, and most of it is string contents: files read, command output,
//! prose. `serde_json` checks string bytes one at a time through a table; here the bytes
//! that need no escape are skipped eight at a time and copied in one piece
//! ([`write_str`]). Measured in release builds on the bench machine, into a reused buffer:
//! 300 KB of Rust source in a message 69 µs against 183 µs, 900 KB of prose 143 µs
//! against 520 µs, the built-in tool schemas (many short strings) 3.5 µs against 5.8 µs.
//! Numbers are left to `serde_json`, so that every float is written as it writes it.
//!
//! The output is `serde_json`'s byte for byte; the tests compare the two on every ASCII
//! byte at every offset of a word, next to UTF-8 characters, on random strings, on every
//! shape serde derives, and on the built-in tool schemas and a request. (An SSE2 scan,
//! sixteen bytes at a time, was measured: 300 KB of Rust source 80 → 64 µs, 900 KB of
//! prose 169 → 83 µs, a few µs on the 50 KB of bodies of the CLI's 3-round task. Its
//! intrinsics need unchecked blocks, which the crate keeps in `exec/`, and a plain loop
//! over sixteen bytes that LLVM vectorises found the byte more slowly than the words:
//! 89 and 137 µs.)

use std::fmt;

use serde::Serialize;
use serde::ser;

/// Why a value could not be written: a map key that is not a string, number or bool,
/// or a `Serialize` implementation's own error.
#[derive(Debug)]
pub(crate) struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error(message.to_string())
    }
}

/// `value` as compact JSON.
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(INITIAL_CAPACITY);
    write(&mut out, value)?;
    Ok(out)
}

/// Appends `value` as compact JSON to `out`. On an error, `out` holds a part of it.
pub(crate) fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    value.serialize(&mut Writer { out, raw: false })
}

/// JSON text that the crate's writer (`crate::json`) copies as it is, through the protocol
/// of `serde_json`'s `RawValue` (so `serde_json`'s own writer copies it too). Only for text
/// known to be valid JSON.
#[derive(Clone, Copy)]
pub(crate) struct RawJson<'a>(pub(crate) &'a str);

/// The struct name of `serde_json`'s `RawValue` protocol.
pub(crate) const RAW_TOKEN: &str = "$serde_json::private::RawValue";

impl Serialize for RawJson<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use ser::SerializeStruct;
        let mut raw = serializer.serialize_struct(RAW_TOKEN, 1)?;
        raw.serialize_field(RAW_TOKEN, self.0)?;
        raw.end()
    }
}

/// A request body is rarely smaller than the system prompt and tool schemas it carries
/// (17 KB in the CLI's first request). Reserving more than that saves the reallocations
/// and their copies; only the pages written are ever touched (16 KiB made the first body
/// grow once: 7 fresh pages instead of 5).
const INITIAL_CAPACITY: usize = 64 * 1024;

/// The escape of each byte below 0x80 that JSON requires escaped: a short form, `u` for
/// `\u00XX`, 0 for none. Bytes from 0x80 up belong to UTF-8 sequences and are copied.
const ESCAPE: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const ONES: u64 = u64::MAX / 255;
const HIGHS: u64 = ONES << 7;

/// The high bit of each byte of `word` (little-endian) that needs an escape: a control
/// byte (below 0x20), `"` or `\`. A byte's bit can also be set by a borrow from a match
/// below it, never without one, so the lowest bit set marks the first byte to escape.
#[inline]
fn escape_bits(word: u64) -> u64 {
    let below_space = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (below_space | quote | backslash) & HIGHS
}

/// The index of the first byte of `bytes[from..]` that needs an escape, or `bytes.len()`:
/// eight bytes at a time, the last few one by one.
#[inline]
fn next_escape(bytes: &[u8], mut from: usize) -> usize {
    while let Some(chunk) = bytes.get(from..from + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let bits = escape_bits(u64::from_le_bytes(word));
        if bits != 0 {
            return from + (bits.trailing_zeros() / 8) as usize;
        }
        from += 8;
    }
    while let Some(&byte) = bytes.get(from) {
        if byte < 0x80 && ESCAPE[usize::from(byte)] != 0 {
            return from;
        }
        from += 1;
    }
    from
}

/// `text` as a JSON string, quotes included.
fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    loop {
        let at = next_escape(bytes, start);
        out.extend_from_slice(&bytes[start..at]);
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        match ESCAPE[usize::from(byte)] {
            b'u' => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
            }
            short => out.extend_from_slice(&[b'\\', short]),
        }
        start = at + 1;
    }
    out.push(b'"');
}

/// Numbers go through `serde_json` so that they are written exactly as it writes them
/// (its integer and shortest-float formatting, `null` for a non-finite float).
fn write_number<T: Serialize>(out: &mut Vec<u8>, number: T) -> Result<(), Error> {
    serde_json::to_writer(&mut *out, &number).map_err(|e| Error(e.to_string()))
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
    /// The next string is JSON text to copy as it is (`serde_json`'s `RawValue` protocol).
    raw: bool,
}

/// An array or object being written: whether an element came before (for the comma),
/// and whether it is the inside of an enum variant, whose `{"variant":` wrapper closes
/// after it. A raw value ([`RAW_TOKEN`]) is a struct whose one field is the text.
struct Compound<'w, 'a> {
    writer: &'w mut Writer<'a>,
    first: bool,
    variant: bool,
    raw: bool,
}

impl<'w, 'a> Compound<'w, 'a> {
    fn open(writer: &'w mut Writer<'a>, bracket: u8, variant: Option<&str>) -> Self {
        if let Some(name) = variant {
            writer.out.push(b'{');
            write_str(writer.out, name);
            writer.out.push(b':');
        }
        writer.out.push(bracket);
        Compound {
            writer,
            first: true,
            variant: variant.is_some(),
            raw: false,
        }
    }

    /// The inside of a raw value: its field's string is copied as it is, nothing around it.
    fn raw(writer: &'w mut Writer<'a>) -> Self {
        Compound {
            writer,
            first: true,
            variant: false,
            raw: true,
        }
    }

    fn comma(&mut self) {
        if !self.first {
            self.writer.out.push(b',');
        }
        self.first = false;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.comma();
        value.serialize(&mut *self.writer)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        if self.raw {
            self.writer.raw = true;
            let written = value.serialize(&mut *self.writer);
            self.writer.raw = false;
            return written;
        }
        self.comma();
        write_str(self.writer.out, key);
        self.writer.out.push(b':');
        value.serialize(&mut *self.writer)
    }

    fn close(self, bracket: u8) -> Result<(), Error> {
        if self.raw {
            return Ok(());
        }
        self.writer.out.push(bracket);
        if self.variant {
            self.writer.out.push(b'}');
        }
        Ok(())
    }
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'w, 'a>;
    type SerializeTuple = Compound<'w, 'a>;
    type SerializeTupleStruct = Compound<'w, 'a>;
    type SerializeTupleVariant = Compound<'w, 'a>;
    type SerializeMap = Compound<'w, 'a>;
    type SerializeStruct = Compound<'w, 'a>;
    type SerializeStructVariant = Compound<'w, 'a>;

    fn serialize_bool(self, value: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, value: i8) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_i16(self, value: i16) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_i32(self, value: i32) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_i64(self, value: i64) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_i128(self, value: i128) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_u8(self, value: u8) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_u16(self, value: u16) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_u32(self, value: u32) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_u64(self, value: u64) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_u128(self, value: u128) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_f32(self, value: f32) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_f64(self, value: f64) -> Result<(), Error> {
        write_number(self.out, value)
    }

    fn serialize_char(self, value: char) -> Result<(), Error> {
        write_str(self.out, value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result<(), Error> {
        if std::mem::take(&mut self.raw) {
            self.out.extend_from_slice(value.as_bytes());
        } else {
            write_str(self.out, value);
        }
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), Error> {
        let mut seq = Compound::open(self, b'[', None);
        for byte in value {
            ser::SerializeSeq::serialize_element(&mut seq, byte)?;
        }
        seq.close(b']')
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        let mut map = Compound::open(self, b'{', None);
        map.field(variant, value)?;
        map.close(b'}')
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'[', None))
    }

    fn serialize_tuple(self, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'[', None))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'[', None))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'[', Some(variant)))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'{', None))
    }

    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Compound<'w, 'a>, Error> {
        if name == RAW_TOKEN {
            return Ok(Compound::raw(self));
        }
        Ok(Compound::open(self, b'{', None))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'w, 'a>, Error> {
        Ok(Compound::open(self, b'{', Some(variant)))
    }
}

/// The serde traits of arrays: each element through [`Compound::element`], then `]`.
macro_rules! array_like {
    ($($name:ident :: $method:ident),*) => {$(
        impl ser::$name for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;

            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }

            fn end(self) -> Result<(), Error> {
                self.close(b']')
            }
        }
    )*};
}

array_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Error;

    /// A key is written as a value, then checked: a string stays, a number or bool is
    /// quoted (as `serde_json` quotes them), anything else is an error.
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.comma();
        let at = self.writer.out.len();
        key.serialize(&mut *self.writer)?;
        match self.writer.out.get(at) {
            Some(b'"') => {}
            Some(b'-' | b'0'..=b'9' | b't' | b'f') => {
                self.writer.out.insert(at, b'"');
                self.writer.out.push(b'"');
            }
            _ => return Err(Error("a map key must be a string".to_string())),
        }
        self.writer.out.push(b':');
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut *self.writer)
    }

    fn end(self) -> Result<(), Error> {
        self.close(b'}')
    }
}

/// The serde traits of objects with static keys: each field through
/// [`Compound::field`], then `}`.
macro_rules! struct_like {
    ($($name:ident),*) => {$(
        impl ser::$name for Compound<'_, '_> {
            type Ok = ();
            type Error = Error;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Error> {
                self.field(key, value)
            }

            fn end(self) -> Result<(), Error> {
                self.close(b'}')
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests;
