//! Forwards a plugin's `tracing` events to the runner. Each plugin library links its own copy of
//! `tracing`, so the runner's subscriber is invisible inside it; this installs, once per library,
//! a subscriber that hands every event to the runner through the host handle.

use std::fmt::Write as _;
use std::sync::OnceLock;

use abi_stable::std_types::RStr;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

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
        }
        .with_filter(max_level);
        // Fails only when the library already installed a subscriber of its own: keep that one.
        let _ =
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(forwarder));
    });
}

struct Forwarder {
    host: HostArc,
    plugin: &'static str,
}

impl<S: Subscriber> Layer<S> for Forwarder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut message = MessageWriter::default();
        event.record(&mut message);
        let target = format!("{}::{}", self.plugin, event.metadata().target());
        self.host.log(
            level_to_u8(*event.metadata().level()),
            RStr::from_str(&target),
            RStr::from_str(&message.0),
        );
    }
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
