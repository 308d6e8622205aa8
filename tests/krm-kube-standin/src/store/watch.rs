//! Watches: the live broadcast of every change and the bounded history a watch resumes from.

use super::{EventKind, Gr, Store, WatchEvent, WatchStart};
use crate::error::ApiError;
use crate::util::meta_str;
use std::sync::Arc;
use tokio::sync::broadcast;

impl Store {
    /// Subscribes to every future change.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }

    /// Starting point of a watch: the events to send first (replayed history after `rv`, or
    /// synthetic ADDED events for the current objects when `rv` is absent or `0`), a receiver for
    /// later events, and the resourceVersion up to which the first part goes.
    pub fn watch_start(
        &self,
        g: &Gr,
        rv: Option<u64>,
        send_initial: bool,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        let now = inner.rv;
        let initial = match rv {
            Some(r) if r > 0 && !send_initial => {
                if r < now && inner.history.front().is_some_and(|e| e.rv > r + 1) {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {r} ({})",
                        inner.history.front().map(|e| e.rv - 1).unwrap_or(now)
                    )));
                }
                inner
                    .history
                    .iter()
                    .filter(|e| e.rv > r && e.gr == *g)
                    .cloned()
                    .collect()
            }
            _ => inner
                .objects
                .get(g)
                .map(|m| {
                    m.iter()
                        .map(|((ns, _), v)| {
                            Arc::new(WatchEvent {
                                gr: g.clone(),
                                ns: ns.clone(),
                                rv: meta_str(v, "resourceVersion")
                                    .and_then(|s| s.parse().ok())
                                    .unwrap_or(now),
                                kind: EventKind::Added,
                                object: v.clone(),
                                old: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok((initial, rx, now))
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::gr;
    use serde_json::json;

    #[test]
    fn watch_from_a_forgotten_resource_version_is_gone() {
        let store = Store::with_history(5);
        let g = gr("", "configmaps");
        for i in 0..10 {
            store
                .create_internal(
                    &g,
                    json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}}),
                )
                .unwrap();
        }
        let now = store.current_rv();
        let err = store.watch_start(&g, Some(1), false).unwrap_err();
        assert_eq!((err.code, err.reason), (410, "Expired"));
        let (replay, _, _) = store.watch_start(&g, Some(now - 2), false).unwrap();
        assert_eq!(replay.len(), 2, "the last two creations are replayed");
        let (initial, _, _) = store.watch_start(&g, None, false).unwrap();
        assert_eq!(
            initial.len(),
            10,
            "no resourceVersion: every current object as ADDED"
        );
    }
}
