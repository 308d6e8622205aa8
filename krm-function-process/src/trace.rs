//! The W3C trace context a function process is handed, so what it does joins the caller's
//! trace.

/// A W3C trace context (<https://www.w3.org/TR/trace-context/>): header values as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<parent span id>-<flags>`.
    pub traceparent: String,
    /// Vendor entries; empty when there are none.
    pub tracestate: String,
}

impl TraceContext {
    /// The longest `tracestate` the W3C specification lets a vendor pass on (32 entries of at
    /// most 256 characters, plus separators); a longer one is dropped rather than cut.
    const MAX_TRACESTATE_BYTES: usize = 32 * 257;

    /// A context from header values as received: `None` when `traceparent` is not one (W3C
    /// version 00 form); a `tracestate` too long or not printable ASCII is dropped.
    pub fn new(traceparent: &str, tracestate: &str) -> Option<Self> {
        let valid = traceparent.len() == 55
            && traceparent
                .bytes()
                .all(|byte| byte.is_ascii_hexdigit() || byte == b'-');
        valid.then(|| Self {
            traceparent: traceparent.to_owned(),
            tracestate: if tracestate.len() <= Self::MAX_TRACESTATE_BYTES
                && tracestate.bytes().all(|byte| (0x20..0x7f).contains(&byte))
            {
                tracestate.to_owned()
            } else {
                String::new()
            },
        })
    }

    /// `TRACEPARENT` and, when not empty, `TRACESTATE`: the environment variables a function
    /// process reads its parent span from (OpenTelemetry's environment-carrier convention).
    pub fn environment(&self) -> Vec<(String, String)> {
        let mut variables = vec![("TRACEPARENT".to_owned(), self.traceparent.clone())];
        if !self.tracestate.is_empty() {
            variables.push(("TRACESTATE".to_owned(), self.tracestate.clone()));
        }
        variables
    }
}
