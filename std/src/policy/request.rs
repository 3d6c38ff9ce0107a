//! [`Request`]: what a policy check is asked about.

/// One request to check: who, where, how many permits.
///
/// `divisor` is how much the client's limits are reduced (1 = not at all); the
/// [`AdaptivePenalty`](super::AdaptivePenalty) decorator raises it for a penalized client,
/// and the policy charges `cost · divisor` permits per tier (capped at the tier's largest
/// cost).
///
/// ```
/// use tollgate::policy::Request;
/// let r = Request::new("acct_123", "/search", 1);
/// assert_eq!((r.client, r.endpoint, r.cost, r.divisor), ("acct_123", "/search", 1, 1));
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request<'a> {
    /// The client (API key, user id, IP).
    pub client: &'a str,
    /// The endpoint (route).
    pub endpoint: &'a str,
    /// Permits the request consumes.
    pub cost: u32,
    /// Limit divisor (1 = full limits).
    pub divisor: u32,
}

impl<'a> Request<'a> {
    /// A request of `cost` permits with full limits.
    pub const fn new(client: &'a str, endpoint: &'a str, cost: u32) -> Request<'a> {
        Request {
            client,
            endpoint,
            cost,
            divisor: 1,
        }
    }

    /// The same request with limits divided by `divisor` (at least 1).
    pub const fn with_divisor(mut self, divisor: u32) -> Request<'a> {
        self.divisor = if divisor == 0 { 1 } else { divisor };
        self
    }
}
