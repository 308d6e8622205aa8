//! Forwards a plugin's `tracing` events to the runner. Each plugin library links its own copy of
//! `tracing`, so the runner's subscriber is invisible inside it; this installs, once per library,
//! a subscriber that hands every event to the runner through the host handle.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use abi_stable::std_types::RStr;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Metadata, Subscriber, span};

use crate::abi::{HostArc, level_to_u8};

static INSTALLED: OnceLock<()> = OnceLock::new();

pub(crate) fn forward_to(host: &HostArc, plugin: &'static str) {
    INSTALLED.get_or_init(|| {
        let max_level = match host.max_log_level() {
            0 => LevelFilter::OFF,
            1 => LevelFilter::ERROR,
            2 => LevelFilter::WARN,
            3 => LevelFilter::INFO,
            4 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        };
        let forwarder = Forwarder {
            host: host.clone(),
            plugin,
            max_level,
            next_span: AtomicU64::new(1),
        };
        // Fails only when the library already installed a subscriber of its own: keep that one.
        let _ = tracing::subscriber::set_global_default(forwarder);
    });
}

/// Only events cross to the runner, so spans need no storage: a span is just a fresh id. (A
/// span registry would cost every one-shot `krm-runner fn` process its table of per-thread
/// shards, eight freshly touched pages, for nothing.)
struct Forwarder {
    host: HostArc,
    plugin: &'static str,
    max_level: LevelFilter,
    next_span: AtomicU64,
}

impl Subscriber for Forwarder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.max_level >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max_level)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed))
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut message = MessageWriter::default();
        event.record(&mut message);
        let target = format!("{}::{}", self.plugin, event.metadata().target());
        self.host.log(
            level_to_u8(*event.metadata().level()),
            RStr::from_str(&target),
            RStr::from_str(&message.0),
        );
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

#[derive(Default)]
struct MessageWriter(String);

impl Visit for MessageWriter {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            self.0.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }
}
