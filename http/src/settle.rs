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
/// - no actual cost, or a service error instead of a response: the estimate stands;
/// - an unreadable header (not a decimal `u32`): the estimate stands, and the response is
///   counted in [`LayerStats::unreadable_costs`](super::LayerStats::unreadable_costs) and
///   logged (`debug`, naming the header): the service wrote what the layer cannot read.
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
    ///
    /// # Errors
    ///
    /// `name` is not a valid header name.
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

    /// The actual cost `response` states (removing the header unless kept).
    pub(crate) fn actual<B>(&self, response: &mut Response<B>) -> Actual {
        let from_ext = response.extensions().get::<TokensUsed>().map(|t| t.0);
        let from_header = self.header.as_ref().and_then(|name| {
            let value = response.headers().get(name)?;
            let read = value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok());
            Some(read.ok_or(name))
        });
        let actual = match (from_ext, from_header) {
            (Some(cost), _) | (None, Some(Ok(cost))) => Actual::Stated(cost),
            (None, None) => Actual::Unstated,
            (None, Some(Err(name))) => {
                super::events::unreadable_cost(name);
                Actual::Unreadable
            }
        };
        if self.strip {
            if let Some(name) = &self.header {
                response.headers_mut().remove(name);
            }
        }
        actual
    }
}

/// What a response says of its actual cost ([`Settle::actual`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Actual {
    /// This many permits.
    Stated(u32),
    /// Nothing: the estimate stands.
    Unstated,
    /// A header the layer cannot read: the estimate stands.
    Unreadable,
}
