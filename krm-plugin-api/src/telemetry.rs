//! A plugin's own metrics and spans, recorded by the runner: measurements land in the runner's
//! Prometheus endpoint, spans in its traces, next to the runner's own.

use abi_stable::std_types::{RSlice, RStr, RString};

use crate::TraceContext;
use crate::abi::{AttributeValueFfi, HostArc, LabelFfi, MeasurementKindFfi, SpanBox};

/// What a measurement does to its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeasurementKind {
    /// Adds a non-negative amount to a counter (exported as `<name>_total`).
    CounterAdd,
    /// Records a value in a histogram (the runner's duration buckets: 0.5 ms to 65 s, so record
    /// seconds).
    HistogramRecord,
    /// Sets a gauge.
    GaugeSet,
}

/// One measurement, as the runner receives it.
#[cfg(feature = "host")]
#[derive(Debug, Clone, Copy)]
pub struct Measurement<'a> {
    /// Counter, histogram or gauge.
    pub kind: MeasurementKind,
    /// The metric's name within the plugin (`[a-z][a-z0-9_]*`).
    pub name: &'a str,
    /// The amount added, the value recorded or the gauge's new value.
    pub value: f64,
    /// Label pairs; the runner bounds their number and values.
    pub labels: &'a [(&'a str, &'a str)],
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    /// Text.
    String(String),
    /// A whole number.
    I64(i64),
    /// A number.
    F64(f64),
    /// `true` or `false`.
    Bool(bool),
}

impl From<&str> for AttributeValue {
    fn from(value: &str) -> Self {
        Self::String(value.to_owned())
    }
}

impl From<String> for AttributeValue {
    fn from(value: String) -> Self {
        Self::String(value)
    }
}

impl From<i64> for AttributeValue {
    fn from(value: i64) -> Self {
        Self::I64(value)
    }
}

impl From<u64> for AttributeValue {
    fn from(value: u64) -> Self {
        Self::I64(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<f64> for AttributeValue {
    fn from(value: f64) -> Self {
        Self::F64(value)
    }
}

impl From<bool> for AttributeValue {
    fn from(value: bool) -> Self {
        Self::Bool(value)
    }
}

impl AttributeValue {
    pub(crate) fn to_ffi(&self) -> AttributeValueFfi {
        match self {
            Self::String(text) => AttributeValueFfi::Str(RString::from(text.as_str())),
            Self::I64(number) => AttributeValueFfi::I64(*number),
            Self::F64(number) => AttributeValueFfi::F64(*number),
            Self::Bool(flag) => AttributeValueFfi::Bool(*flag),
        }
    }

    #[cfg(feature = "host")]
    pub(crate) fn from_ffi(value: AttributeValueFfi) -> Self {
        match value {
            AttributeValueFfi::Str(text) => Self::String(text.into_string()),
            AttributeValueFfi::I64(number) => Self::I64(number),
            AttributeValueFfi::F64(number) => Self::F64(number),
            AttributeValueFfi::Bool(flag) => Self::Bool(flag),
        }
    }
}

impl MeasurementKind {
    pub(crate) fn to_ffi(self) -> MeasurementKindFfi {
        match self {
            Self::CounterAdd => MeasurementKindFfi::CounterAdd,
            Self::HistogramRecord => MeasurementKindFfi::HistogramRecord,
            Self::GaugeSet => MeasurementKindFfi::GaugeSet,
        }
    }

    #[cfg(feature = "host")]
    pub(crate) fn from_ffi(kind: MeasurementKindFfi) -> Self {
        match kind {
            MeasurementKindFfi::CounterAdd => Self::CounterAdd,
            MeasurementKindFfi::HistogramRecord => Self::HistogramRecord,
            MeasurementKindFfi::GaugeSet => Self::GaugeSet,
        }
    }
}

/// The runner's metrics and traces, as a plugin reaches them ([`crate::BuildContext::telemetry`]).
/// Cheap to clone; keep one in the evaluator. When the runner exports no metrics (or no traces)
/// the calls do nothing.
///
/// Metrics are the plugin's own: the runner exports `name` as `krm_plugin_<plugin>_<name>` with
/// an `evaluator` label naming the instance. A name is lower-case letters, digits and `_`
/// (at most 64 bytes), and keeps the kind it was first recorded with; give counters no `_total`
/// suffix. Labels: at most 8, keys named like metrics (`evaluator` is the runner's); values as
/// the runner's own labels are bounded: a metric's first 500 distinct label sets keep their
/// values, later ones (and values over 256 bytes) count under `other`. A measurement the runner
/// cannot take is logged once per metric and dropped.
#[derive(Clone)]
pub struct Telemetry {
    host: HostArc,
}

impl Telemetry {
    pub(crate) fn new(host: HostArc) -> Self {
        Self { host }
    }

    /// Adds `value` (not negative) to the counter `name`.
    pub fn counter_add(&self, name: &str, value: f64, labels: &[(&str, &str)]) {
        self.record(MeasurementKind::CounterAdd, name, value, labels);
    }

    /// Records `value` in the histogram `name`.
    pub fn histogram_record(&self, name: &str, value: f64, labels: &[(&str, &str)]) {
        self.record(MeasurementKind::HistogramRecord, name, value, labels);
    }

    /// Sets the gauge `name` to `value`.
    pub fn gauge_set(&self, name: &str, value: f64, labels: &[(&str, &str)]) {
        self.record(MeasurementKind::GaugeSet, name, value, labels);
    }

    fn record(&self, kind: MeasurementKind, name: &str, value: f64, labels: &[(&str, &str)]) {
        let labels: Vec<LabelFfi<'_>> = labels
            .iter()
            .map(|(key, value)| LabelFfi {
                key: RStr::from_str(key),
                value: RStr::from_str(value),
            })
            .collect();
        self.host.record(
            kind.to_ffi(),
            RStr::from_str(name),
            value,
            RSlice::from_slice(&labels),
        );
    }

    /// Opens the span `name` as a child of `parent` (usually [`crate::CallContext::trace_context`],
    /// so the span joins the call's trace; `None`: a trace of its own). The span ends when
    /// dropped; when the runner does not trace, it records nothing.
    pub fn start_span(&self, parent: Option<&TraceContext>, name: &str) -> Span {
        let parent = parent.map(crate::call::trace_to_wire).unwrap_or_default();
        Span(
            self.host
                .start_span(RStr::from_str(&parent), RStr::from_str(name))
                .into_option(),
        )
    }
}

/// A span opened with [`Telemetry::start_span`]; it ends when dropped.
pub struct Span(Option<SpanBox>);

impl Span {
    /// Whether the runner traces (the span may still be sampled out).
    pub fn is_traced(&self) -> bool {
        self.0.is_some()
    }

    /// Sets an attribute of the span (key and value are length-capped by the runner).
    pub fn set_attribute(&self, key: &str, value: impl Into<AttributeValue>) {
        if let Some(span) = &self.0 {
            span.set_attribute(RStr::from_str(key), value.into().to_ffi());
        }
    }

    /// Marks the span failed.
    pub fn set_error(&self, message: &str) {
        if let Some(span) = &self.0 {
            span.set_error(RStr::from_str(message));
        }
    }

    /// This span's W3C context, to pass on to a process or server so that its work shows
    /// under this span; `None` when not recording.
    pub fn trace_context(&self) -> Option<TraceContext> {
        crate::call::trace_from_wire(self.0.as_ref()?.trace_context().as_str())
    }

    /// Ends the span now.
    pub fn end(self) {}
}
