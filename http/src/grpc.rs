//! The layer's answers to a gRPC call: a *trailers-only* response (HTTP 200, the gRPC
//! status in the headers, no body), which every gRPC client reads as a status, where an
//! HTTP 429 with a JSON body reads as a protocol error (its first byte, `{`, taken for a
//! frame's compression flag).
//!
//! | refusal | `grpc-status` | also |
//! |---|---|---|
//! | denied | 8, `RESOURCE_EXHAUSTED` | `retry-after`, a `google.rpc.RetryInfo` in `grpc-status-details-bin` |
//! | refused by a deny entry or a ban | 7, `PERMISSION_DENIED` | the reason in the message; no retry (waiting does not end it) |
//! | a cost the limits can never admit | 3, `INVALID_ARGUMENT` | (retrying cannot succeed) |
//! | no usable client key | 3, `INVALID_ARGUMENT` | |
//! | no peer address (the server's wiring) | 13, `INTERNAL` | |
//!
//! `grpc-message` is percent-encoded as the gRPC HTTP/2 protocol says (bytes outside
//! printable ASCII, and `%`). `grpc-status-details-bin` is a serialized `google.rpc.Status`
//! (code, message, details), base64 without padding as gRPC's binary metadata is sent.
//! The three messages it needs are written here by hand (a handful of protobuf fields, in
//! field order) rather than through a protobuf code generator; the tests decode them with
//! `tonic-types`.
//!
//! A call is gRPC when its `content-type` is `application/grpc` or `application/grpc+…` /
//! `application/grpc;…`, answered as `application/grpc`; or gRPC-Web
//! (`application/grpc-web…`, `application/grpc-web-text…`), answered in the call's own
//! content type: gRPC-Web sends a trailers-only response as headers with no body, as gRPC
//! does, so a gRPC-Web client (or a gRPC client behind a gRPC-Web proxy) reads the status.

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response};
use http_body_util::Full;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

use super::problem::retry_secs;
use tollgate::policy::PolicyDecision;
use tollgate::Nanos;

/// gRPC's status codes the layer answers with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// 3: the request is unusable as sent (no client key, a cost beyond every limit).
    InvalidArgument = 3,
    /// 7: a deny list entry or a ban refused the call; retrying will not help.
    PermissionDenied = 7,
    /// 8: a limit denied the call; retry after the `RetryInfo` delay.
    ResourceExhausted = 8,
    /// 13: the server's wiring gives the layer nothing to key the call by.
    Internal = 13,
}

/// What `grpc-message` escapes besides the non-ASCII bytes: controls, DEL and `%`.
const MESSAGE_ESCAPES: &AsciiSet = &CONTROLS.add(b'%');

/// The type URL of `google.rpc.RetryInfo` in a `google.protobuf.Any`.
const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The content type to answer a call with `headers` in if it is a gRPC or gRPC-Web call
/// (see the module docs); `None` for any other request.
#[inline]
pub(crate) fn answer_type(headers: &HeaderMap) -> Option<HeaderValue> {
    let value = headers.get(CONTENT_TYPE)?;
    let rest = value.as_bytes().strip_prefix(b"application/grpc")?;
    match rest.first() {
        None | Some(b'+' | b';') => Some(HeaderValue::from_static("application/grpc")),
        Some(b'-') => {
            let web = rest.strip_prefix(b"-web")?;
            let web = web.strip_prefix(b"-text").unwrap_or(web);
            matches!(web.first(), None | Some(b'+' | b';')).then(|| value.clone())
        }
        Some(_) => None,
    }
}

/// The trailers-only answer, in `content_type` (see [`answer_type`]), with `code` and
/// `message`, and, for a deny, when to retry.
pub(crate) fn refusal(
    content_type: HeaderValue,
    code: Code,
    message: &str,
    retry: Option<Nanos>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert("grpc-status", HeaderValue::from(code as u32));
    let escaped: String = utf8_percent_encode(message, MESSAGE_ESCAPES).collect();
    if let Ok(value) = HeaderValue::try_from(escaped) {
        headers.insert("grpc-message", value);
    }
    let details = STANDARD_NO_PAD.encode(status_message(code, message, retry));
    if let Ok(value) = HeaderValue::try_from(details) {
        headers.insert("grpc-status-details-bin", value);
    }
    if let Some(retry) = retry {
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_secs(retry)));
    }
    response
}

/// The answer to a denied call: `RESOURCE_EXHAUSTED`, naming each denying rule and tier,
/// with the decision's exact retry time in the `RetryInfo` (never 0) and rounded up to
/// whole seconds in `retry-after`.
pub(crate) fn resource_exhausted(
    content_type: HeaderValue,
    decision: &PolicyDecision,
) -> Response<Full<Bytes>> {
    let retry = decision.decision.retry_after.max(Nanos::new(1));
    let mut message = String::from("rate limit exceeded by ");
    for (i, t) in decision.denied_by().enumerate() {
        if i > 0 {
            message.push_str(", ");
        }
        message.push_str("rule '");
        message.push_str(t.rule_name());
        message.push_str("' tier '");
        message.push_str(t.name());
        message.push('\'');
    }
    message.push_str("; retry in ");
    message.push_str(&retry_secs(retry).to_string());
    message.push_str(" s");
    refusal(content_type, Code::ResourceExhausted, &message, Some(retry))
}

/// The answer to a call a deny entry or a ban refused: `PERMISSION_DENIED` with the
/// reason (and what refused it), no retry.
pub(crate) fn permission_denied(
    content_type: HeaderValue,
    decision: &PolicyDecision,
) -> Response<Full<Bytes>> {
    let message = format!(
        "refused by {}: {}",
        super::problem::refused_by(decision),
        super::problem::refusal_detail(decision)
    );
    refusal(content_type, Code::PermissionDenied, &message, None)
}

/// A serialized `google.rpc.Status { code = 1; message = 2; repeated Any details = 3 }`,
/// with one `RetryInfo` detail when `retry` is given.
fn status_message(code: Code, message: &str, retry: Option<Nanos>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + message.len());
    field_varint(&mut out, 1, code as u64);
    field_bytes(&mut out, 2, message.as_bytes());
    if let Some(retry) = retry {
        // google.protobuf.Duration { int64 seconds = 1; int32 nanos = 2 }, zero fields
        // left out (proto3).
        let mut duration = Vec::with_capacity(16);
        let (secs, nanos) = (
            retry.as_u64() / 1_000_000_000,
            retry.as_u64() % 1_000_000_000,
        );
        if secs > 0 {
            field_varint(&mut duration, 1, secs);
        }
        if nanos > 0 {
            field_varint(&mut duration, 2, nanos);
        }
        // google.rpc.RetryInfo { Duration retry_delay = 1 }.
        let mut retry_info = Vec::with_capacity(20);
        field_bytes(&mut retry_info, 1, &duration);
        // google.protobuf.Any { string type_url = 1; bytes value = 2 }.
        let mut any = Vec::with_capacity(RETRY_INFO_TYPE.len() + 24);
        field_bytes(&mut any, 1, RETRY_INFO_TYPE.as_bytes());
        field_bytes(&mut any, 2, &retry_info);
        field_bytes(&mut out, 3, &any);
    }
    out
}

/// Appends `value` as a protobuf base-128 varint.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        // Truncation: the low seven bits, with the continuation bit set.
        #[allow(clippy::cast_possible_truncation)]
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    // Truncation: below 0x80 here.
    #[allow(clippy::cast_possible_truncation)]
    out.push(value as u8);
}

/// Appends field `number` as a varint (wire type 0).
fn field_varint(out: &mut Vec<u8>, number: u64, value: u64) {
    varint(out, number << 3);
    varint(out, value);
}

/// Appends field `number` as length-delimited bytes (wire type 2: a string, bytes or an
/// embedded message).
fn field_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    varint(out, (number << 3) | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let answer = |ct: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            answer_type(&headers)
        };
        let grpc = Some(HeaderValue::from_static("application/grpc"));
        assert_eq!(answer("application/grpc"), grpc);
        assert_eq!(answer("application/grpc+proto"), grpc);
        assert_eq!(answer("application/grpc;charset=utf-8"), grpc);
        for web in [
            "application/grpc-web",
            "application/grpc-web+proto",
            "application/grpc-web-text",
            "application/grpc-web-text+proto",
            "application/grpc-web;charset=utf-8",
        ] {
            assert_eq!(answer(web), Some(HeaderValue::from_static(web)), "{web}");
        }
        for not in [
            "application/grpcx",
            "application/grpc-webx",
            "application/grpc-web-textual",
            "application/grpc-other",
            "application/json",
        ] {
            assert_eq!(answer(not), None, "{not}");
        }
        assert_eq!(answer_type(&HeaderMap::new()), None);
    }

    #[test]
    fn varints() {
        let enc = |v| {
            let mut out = Vec::new();
            varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(enc(u64::MAX).len(), 10);
    }

    #[test]
    fn a_status_with_retry_info_is_the_protobuf_bytes() {
        // code 8, message "x", RetryInfo of 1.5 s, by the protobuf encoding rules.
        let bytes = status_message(
            Code::ResourceExhausted,
            "x",
            Some(Nanos::new(1_500_000_000)),
        );
        let mut want = vec![0x08, 8, 0x12, 1, b'x', 0x1a];
        let duration = [0x08, 1, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01];
        let retry_info = [&[0x0a, duration.len() as u8][..], &duration].concat();
        let any = [
            &[0x0a, RETRY_INFO_TYPE.len() as u8][..],
            RETRY_INFO_TYPE.as_bytes(),
            &[0x12, retry_info.len() as u8],
            &retry_info,
        ]
        .concat();
        want.push(any.len() as u8);
        want.extend_from_slice(&any);
        assert_eq!(bytes, want);
    }

    #[test]
    fn messages_are_percent_encoded() {
        let response = refusal(
            HeaderValue::from_static("application/grpc"),
            Code::InvalidArgument,
            "50% café\n",
            None,
        );
        assert_eq!(response.headers()["grpc-message"], "50%25 caf%C3%A9%0A");
        assert_eq!(response.headers()["grpc-status"], "3");
        assert_eq!(response.status(), 200);
        assert!(response.headers().get(RETRY_AFTER).is_none());
    }
}
