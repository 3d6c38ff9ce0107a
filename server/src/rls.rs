//! Envoy's Rate Limit Service, v3 (`envoy.service.ratelimit.v3.RateLimitService`), over
//! gRPC: each `ShouldRateLimit` read into an [`Ask`], decided by the [`Engine`], and its
//! [`Verdict`] written back as Envoy reads it.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;
use tollgate::Nanos;

use crate::answer::{count, Ask, AskDescriptor, Code, Refusal, Status, Verdict};
use crate::engine::Engine;

/// The gRPC service over an engine.
pub(crate) struct Rls {
    engine: Arc<Engine>,
    /// Whether answers carry the draft-11 `RateLimit` headers for Envoy to add.
    headers: bool,
}

impl Rls {
    /// The service, ready to serve.
    pub(crate) fn server(engine: Arc<Engine>, headers: bool) -> RateLimitServiceServer<Rls> {
        RateLimitServiceServer::new(Rls { engine, headers })
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let verdict = self
            .engine
            .decide_whole("grpc", request.into_inner(), ask_of)
            .await
            .map_err(invalid)?;
        count("grpc", verdict.code.name());
        Ok(tonic::Response::new(response(verdict, self.headers)))
    }
}

/// A refused request, as gRPC's `INVALID_ARGUMENT`.
fn invalid(refusal: Refusal) -> tonic::Status {
    tracing::debug!(error = %refusal, "ShouldRateLimit refused");
    count("grpc", "invalid");
    tonic::Status::invalid_argument(refusal.to_string())
}

/// `request` as the engine's question.
fn ask_of(request: &RateLimitRequest) -> Result<Ask<'_>, Refusal> {
    let mut ask = Ask {
        domain: &request.domain,
        hits: request.hits_addend,
        descriptors: Vec::with_capacity(request.descriptors.len()),
    };
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.limit.is_some() {
            return Err(Refusal::Unsupported(
                "descriptors[].limit (a limit override)",
            ));
        }
        let mut asked = AskDescriptor {
            hits: descriptor.hits_addend.as_ref().map(|h| h.value),
            negative: descriptor.is_negative_hits,
            entries: Vec::with_capacity(descriptor.entries.len()),
        };
        for entry in &descriptor.entries {
            asked.entries.push((&entry.key, &entry.value));
        }
        if asked.entries.is_empty() {
            return Err(Refusal::EmptyDescriptor(i));
        }
        ask.descriptors.push(asked);
    }
    Ok(ask)
}

/// `verdict` as Envoy reads it.
fn response(verdict: Verdict, headers: bool) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code(verdict.code),
        statuses: verdict
            .statuses
            .into_iter()
            .map(descriptor_status)
            .collect(),
        response_headers_to_add: if headers {
            verdict
                .headers
                .into_iter()
                .map(|(key, value)| HeaderValue {
                    key: key.to_owned(),
                    value,
                    ..HeaderValue::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        ..RateLimitResponse::default()
    }
}

/// A descriptor's status as Envoy reads it.
fn descriptor_status(status: Status) -> DescriptorStatus {
    DescriptorStatus {
        code: code(status.code),
        current_limit: status
            .limit
            .map(|(name, requests_per_unit, unit)| RateLimit {
                name: name.into(),
                requests_per_unit,
                unit: unit.proto() as i32,
            }),
        limit_remaining: status.remaining,
        duration_until_reset: status.reset_after.map(duration),
        ..DescriptorStatus::default()
    }
}

/// An answer code's protocol value.
fn code(code: Code) -> i32 {
    match code {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    }
}

/// A span of time as protobuf's `Duration`, in whole seconds rounded up, as the Go service
/// answers `duration_until_reset` (`unit - now % unit`): Envoy reads only the seconds (into
/// `X-RateLimit-Reset`), so a fraction cut off would say a window ends before it does.
fn duration(span: Nanos) -> Duration {
    Duration {
        seconds: i64::try_from(span.as_secs_ceil()).unwrap_or(i64::MAX),
        nanos: 0,
    }
}
