//! [`ReplyValue`]: a fuzzed Redis reply, for the Redis reply decoder.

use arbitrary::Arbitrary;
use redis::Value;

/// A Redis reply of any shape: the values a script can return, hex numbers (what the
/// tollgate runner sends) among them, nested arrays up to a small depth.
#[derive(Arbitrary, Clone, Debug, PartialEq)]
pub enum ReplyValue {
    /// `nil`.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string of any bytes.
    Bulk(Vec<u8>),
    /// A bulk string holding `{:016x}` of the value (well-formed number).
    Hex(u64),
    /// A bulk string holding any hex spelling (upper case, short, long, signed).
    HexText(String),
    /// A status reply.
    Simple(String),
    /// `OK`.
    Okay,
    /// A double (RESP3).
    Double(f64),
    /// An array.
    Array(Vec<ReplyValue>),
}

impl ReplyValue {
    /// The `redis` crate's value; arrays deeper than `depth` become `nil`.
    pub fn to_value(&self, depth: u32) -> Value {
        match self {
            ReplyValue::Nil => Value::Nil,
            ReplyValue::Int(i) => Value::Int(*i),
            ReplyValue::Bulk(bytes) => Value::BulkString(bytes.clone()),
            ReplyValue::Hex(v) => Value::BulkString(format!("{v:016x}").into_bytes()),
            ReplyValue::HexText(s) => Value::BulkString(s.clone().into_bytes()),
            ReplyValue::Simple(s) => Value::SimpleString(s.clone()),
            ReplyValue::Okay => Value::Okay,
            ReplyValue::Double(d) => Value::Double(*d),
            ReplyValue::Array(items) if depth > 0 => {
                Value::Array(items.iter().map(|v| v.to_value(depth - 1)).collect())
            }
            ReplyValue::Array(_) => Value::Nil,
        }
    }
}
