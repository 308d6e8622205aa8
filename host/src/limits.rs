//! Porch's clients expect RESOURCE_EXHAUSTED for a request over the message limit (grpc-go's
//! code); tonic answers OUT_OF_RANGE. This layer rewrites exactly that answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::{Code, Status};
use tower::{Layer, Service};

#[derive(Debug, Clone, Copy)]
pub struct ResourceExhaustedLayer {
    limit: usize,
}

impl ResourceExhaustedLayer {
    pub fn new(limit: usize) -> Self {
        Self { limit }
    }
}

impl<S> Layer<S> for ResourceExhaustedLayer {
    type Service = ResourceExhausted<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ResourceExhausted {
            inner,
            limit: self.limit,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ResourceExhausted<S> {
    inner: S,
    limit: usize,
}

impl<S, Req, B> Service<Req> for ResourceExhausted<S>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let limit = self.limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            let mut response = response.await?;
            rewrite_too_large(response.headers_mut(), limit);
            Ok(response)
        })
    }
}

fn rewrite_too_large(headers: &mut http::HeaderMap, limit: usize) {
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if status.code() != Code::OutOfRange
        || !status
            .message()
            .contains("decoded message length too large")
    {
        return;
    }
    let size = status
        .message()
        .split("found ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or("?");
    let exhausted = Status::resource_exhausted(format!(
        "request message of {size} bytes exceeds max_message_bytes {limit} (--max-request-body-size)"
    ));
    let _ = exhausted.add_header(headers);
}
