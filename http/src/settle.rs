//! [`Settle`]: reservations over HTTP — a request is charged an estimate up front and
//! settled from its response ([`TokensUsed`] extension or a header carrying the actual
//! cost): the difference is refunded, or the extra charged.

use http::{HeaderName, Response};

/// A response extension a handler (or an inner layer) sets to the request's actual cost,
/// for [`Settle`] to settle against the estimate. Takes precedence over the header.
///
/// ```
/// use tollgate_http::TokensUsed;
/// let mut response = http::Response::new(());
/// response.extensions_mut().insert(TokensUsed(1234));
/// # let _ = response;
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TokensUsed(pub u32);

/// How the actual cost is read from a response, for
/// [`RateLimitLayer::settle`](super::RateLimitLayer::settle).
///
/// The layer charges the request's estimated cost (see
/// [`RateLimitLayer::cost`](super::RateLimitLayer::cost)) before calling the service. Once
/// the response head is there it reads the actual cost — the [`TokensUsed`] extension,
/// else the header (a decimal `u32`) — and:
///
/// - actual < estimate: refunds `estimate − actual` to every tier that was charged
///   ([`PolicyCheck::refund`](tollgate::policy::PolicyCheck::refund));
/// - actual > estimate: charges the extra
///   ([`PolicyCheck::charge_at`](tollgate::policy::PolicyCheck::charge_at)), counted in
///   [`LayerStats::charged`](super::LayerStats::charged): the work was done, so it is
///   recorded even past a limit, and the client is denied until the debt is repaid;
/// - no actual cost, or an unreadable one, or a service error instead of a response: the
///   estimate stands.
///
/// The response's rate-limit fields then report the key's state after settlement (the
/// settled cost, not the estimate). The header is removed from the response unless
/// [`keep_header`](Self::keep_header) (the response of a request the layer skips is not
/// read: it is passed on as the service wrote it).
///
/// ```
/// use tollgate_http::Settle;
/// let settle = Settle::from_header("x-tokens-used")?;
/// # let _ = settle;
/// # Ok::<(), http::header::InvalidHeaderName>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settle {
    header: Option<HeaderName>,
    strip: bool,
}

impl Settle {
    /// Settles from the [`TokensUsed`] extension only.
    pub fn from_extension() -> Settle {
        Settle {
            header: None,
            strip: false,
        }
    }

    /// Settles from the [`TokensUsed`] extension, else the header `name`.
    pub fn from_header(name: &str) -> Result<Settle, http::header::InvalidHeaderName> {
        Ok(Settle {
            header: Some(HeaderName::from_bytes(name.as_bytes())?),
            strip: true,
        })
    }

    /// Leaves the header in the response sent to the client.
    pub fn keep_header(mut self) -> Settle {
        self.strip = false;
        self
    }

    /// The actual cost of `response`, if it states one (removing the header unless kept).
    pub fn actual<B>(&self, response: &mut Response<B>) -> Option<u32> {
        let from_ext = response.extensions().get::<TokensUsed>().map(|t| t.0);
        let from_header = self.header.as_ref().and_then(|name| {
            let value = response.headers().get(name)?;
            value.to_str().ok()?.trim().parse::<u32>().ok()
        });
        if self.strip {
            if let Some(name) = &self.header {
                response.headers_mut().remove(name);
            }
        }
        from_ext.or(from_header)
    }
}
