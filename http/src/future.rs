//! [`ResponseFuture`]: the future of [`RateLimit::call`](super::RateLimit), through its
//! states — an answer of the layer's own, an awaited check, a leaky bucket's delay, the
//! inner service's call, an awaited settlement.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tollgate::policy::Op;
use tollgate::Nanos;
use tower_service::Service;

use super::admit::{admit, Admitted, Verdict};
use super::charge::{Charge, Held};
use super::check::{decided, Answer};
use super::events::{self, CheckTimer};
use super::header_style::Fields;
use super::layer::Shared;
use super::settle::Actual;
use super::stats::Outcome;
use super::RateLimitBody;
use tollgate::wait::finish;
use tollgate::wait::Delay;

/// The charge of a request passed on, spent from then on (kept for settling).
type Spent = Option<Box<Charge>>;

/// A delay being waited out, on tollgate's [`Delay`] thread under any executor. Not on
/// tokio's timer: a runtime built without `enable_time` panics on a tokio sleep, and
/// nothing tells the layer whether the runtime it runs on has one.
type Sleep = Delay;

/// A delayed request: the sleep, the readied service and the request it will get, and
/// the permits to give back if it never does.
struct Waiting<S, B> {
    sleep: Sleep,
    inner: Option<S>,
    request: Option<Request<B>>,
    held: Held,
}

/// Sleeps `d` (see [`Sleep`]).
fn sleep(d: Nanos) -> Sleep {
    Delay::new(d.as_duration())
}

/// A request whose check is awaited (see
/// [`RateLimitLayer::awaited`](super::RateLimitLayer::awaited)): the answer to come, the
/// readied service and the request it will get, and the key the answer is for.
pub(super) struct Deciding<S, B> {
    pub(super) answer: Answer,
    pub(super) shared: Arc<Shared>,
    pub(super) inner: Option<S>,
    pub(super) request: Option<Request<B>>,
    pub(super) client: String,
    pub(super) endpoint: String,
    pub(super) cost: u32,
    /// When the check started.
    pub(super) timer: CheckTimer,
}

/// A request dropped while its check is awaited (its client gone, a timeout): counted
/// `cancelled`, and its answer awaited on a spawned task, so that the permits an admitting
/// one took (a Redis script runs once sent, whoever waits for its reply) are given back.
/// Outside a tokio runtime nothing can await it: the answer is dropped, and what it took
/// stays taken (the safe side: never more admitted than the limit).
impl<S, B> Drop for Deciding<S, B> {
    fn drop(&mut self) {
        if self.request.is_none() {
            // Decided: the verdict took the request on.
            return;
        }
        self.shared.counters.count(Outcome::Cancelled);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            events::refund_lost(&self.endpoint);
            return;
        };
        let answer = std::mem::replace(&mut self.answer, Box::pin(std::future::ready(Ok(None))));
        let policy = Arc::clone(&self.shared.policy);
        let (client, endpoint) = (
            std::mem::take(&mut self.client),
            std::mem::take(&mut self.endpoint),
        );
        let cost = self.cost;
        runtime.spawn(async move {
            if matches!(decided(answer.await), Ok(d) if d.allowed()) {
                // A refund decides nothing, so it cannot fail.
                let _ = policy.run(Op::Refund, client, endpoint, cost).await;
            }
        });
    }
}

impl<S, B> Deciding<S, B> {
    /// The future that follows the answer, once it came (`None`: polled after
    /// completion). Out of line, as [`Waiting::call`] is: the in-process path's states stay
    /// compact.
    #[inline(never)]
    fn next<ResBody>(&mut self, cx: &mut Context<'_>) -> Poll<Option<ResponseFuture<S, B>>>
    where
        S: Service<Request<B>, Response = Response<ResBody>> + Clone,
    {
        let Poll::Ready(answer) = self.answer.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        let (Some(mut service), Some(request)) = (self.inner.take(), self.request.take()) else {
            return Poll::Ready(None);
        };
        self.timer.checked();
        let decision = decided(answer);
        let shared = Arc::clone(&self.shared);
        Poll::Ready(Some(
            match admit(
                &shared,
                request.headers(),
                decision.as_ref().map_err(|e| *e),
                &self.client,
                &|| self.endpoint.as_str(),
                self.cost,
            ) {
                Verdict::Forward(admitted) => {
                    ResponseFuture::forward(&shared, admitted, request, &mut service)
                }
                Verdict::Answer(response) => ResponseFuture::answer(response),
                Verdict::Pass => ResponseFuture::pass(request, &mut service),
            },
        ))
    }
}

impl<S, B> Waiting<S, B> {
    /// The inner service's call, once the delay is over (`None`: polled after
    /// completion), and the charge it spends from then on (kept for settling).
    #[inline(never)]
    fn call(&mut self, cx: &mut Context<'_>) -> Poll<Option<(S::Future, Spent)>>
    where
        S: Service<Request<B>>,
    {
        if Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let (Some(mut service), Some(request)) = (self.inner.take(), self.request.take()) else {
            return Poll::Ready(None);
        };
        // Forwarded: the permits are spent from here on.
        let charge = self.held.release();
        Poll::Ready(Some((service.call(request), charge)))
    }
}

/// The rate-limit fields after an awaited settlement (`None`: keep the admission's).
type Settled = Pin<Box<dyn Future<Output = Option<Fields>> + Send>>;

pin_project! {
    /// The future of [`RateLimit::call`](super::RateLimit).
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future, S::Response>,
        fields: Fields,
        charge: Spent,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F, R> {
        Answer { response: Option<Response<Full<Bytes>>> },
        // Boxed: only awaited checks pay for the room it takes.
        Deciding { deciding: Box<Deciding<S, B>> },
        // Boxed: only delayed requests pay for the room it takes.
        Waiting { wait: Box<Waiting<S, B>> },
        Calling { #[pin] future: F },
        // The inner service's call, its response passed on as it comes (no fields to
        // write, nothing to settle).
        Passing { #[pin] future: F },
        // An awaited settlement, with the response it completes.
        Settling { settled: Settled, response: Option<R> },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    /// A future answering `response`, the layer's own (the service is not called).
    pub(super) fn answer(response: Response<Full<Bytes>>) -> ResponseFuture<S, B> {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
            fields: Fields::default(),
            charge: None,
        }
    }

    /// A future calling the readied `inner` with `request`, unchecked and unchanged.
    pub(super) fn pass(request: Request<B>, inner: &mut S) -> ResponseFuture<S, B> {
        ResponseFuture {
            state: State::Passing {
                future: inner.call(request),
            },
            fields: Fields::default(),
            charge: None,
        }
    }

    /// A future awaiting the check of `deciding`, then answering or forwarding.
    pub(super) fn deciding(deciding: Deciding<S, B>) -> ResponseFuture<S, B> {
        ResponseFuture {
            state: State::Deciding {
                deciding: Box::new(deciding),
            },
            fields: Fields::default(),
            charge: None,
        }
    }

    /// Passes an admitted request on to the readied service `inner`: at once, or after its
    /// delay (then a clone of `inner` takes the readied one's place).
    #[inline(always)]
    pub(super) fn forward(
        shared: &Shared,
        admitted: Admitted,
        mut request: Request<B>,
        inner: &mut S,
    ) -> ResponseFuture<S, B>
    where
        S: Clone,
    {
        let Admitted {
            fields,
            charge,
            delay,
            admission,
        } = admitted;
        if let Some(admission) = admission {
            request.extensions_mut().insert(admission);
        }
        if delay > Nanos::ZERO {
            shared.counters.count(Outcome::Delayed);
            // The readied service waits with the request; a clone takes its place.
            let clone = inner.clone();
            let ready = std::mem::replace(inner, clone);
            return ResponseFuture {
                state: State::Waiting {
                    wait: Box::new(Waiting {
                        sleep: sleep(delay),
                        inner: Some(ready),
                        request: Some(request),
                        held: Held(charge),
                    }),
                },
                fields,
                charge: None,
            };
        }
        ResponseFuture {
            state: State::Calling {
                future: inner.call(request),
            },
            fields,
            charge,
        }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone,
{
    type Output = Result<Response<RateLimitBody<ResBody>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let this = self.as_mut().project();
            match this.state.project() {
                StateProj::Answer { response } => {
                    return match response.take() {
                        Some(r) => Poll::Ready(Ok(r.map(Either::Right))),
                        // Polled after completion.
                        None => Poll::Pending,
                    };
                }
                StateProj::Deciding { deciding } => match deciding.next(cx) {
                    Poll::Ready(Some(next)) => self.set(next),
                    // Polled after completion, or the answer is still to come.
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                },
                StateProj::Waiting { wait } => {
                    let Poll::Ready(Some((future, charge))) = wait.call(cx) else {
                        return Poll::Pending;
                    };
                    let mut this = self.as_mut().project();
                    if this.charge.is_none() {
                        *this.charge = charge.filter(|c| c.shared.settle.is_some());
                    }
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => {
                    let mut response = match future.poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(r)) => r,
                    };
                    if let Some(charge) = this.charge.take() {
                        if let Some(settle) = &charge.shared.settle {
                            let stated = match settle.actual(&mut response) {
                                Actual::Stated(actual) => Some(actual),
                                Actual::Unstated => None,
                                Actual::Unreadable => {
                                    charge.shared.counters.unreadable_costs.add(1);
                                    None
                                }
                            };
                            if let Some(actual) = stated {
                                // The fields report the settled cost, not the estimate.
                                if charge.shared.awaited {
                                    let settled =
                                        Box::pin(async move { charge.settle(actual).await });
                                    self.as_mut().project().state.set(State::Settling {
                                        settled,
                                        response: Some(response),
                                    });
                                    continue;
                                }
                                if let Some(fields) = finish(charge.settle(actual)) {
                                    *this.fields = fields;
                                }
                            }
                        }
                    }
                    // Most admitted requests of a layer without headers carry none: no
                    // move, no header map touched.
                    if !matches!(this.fields, Fields::None) {
                        std::mem::take(this.fields).insert_into(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response.map(Either::Left)));
                }
                StateProj::Passing { future } => {
                    return future
                        .poll(cx)
                        .map(|answer| answer.map(|response| response.map(Either::Left)));
                }
                StateProj::Settling { settled, response } => {
                    let Poll::Ready(after) = settled.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    let Some(mut response) = response.take() else {
                        // Polled after completion.
                        return Poll::Pending;
                    };
                    let fields = after.unwrap_or_else(|| std::mem::take(this.fields));
                    fields.insert_into(response.headers_mut());
                    return Poll::Ready(Ok(response.map(Either::Left)));
                }
            }
        }
    }
}
