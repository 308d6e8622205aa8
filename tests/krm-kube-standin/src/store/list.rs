//! Listing: selectors and paging, with a continue token that names the last key returned.

use super::{ListPage, Store};
use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use serde_json::Value;

impl Store {
    /// LIST with selectors and paging (`limit`, `continue`).
    pub fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let after: Option<(String, String)> = match cont {
            Some(c) if !c.is_empty() => {
                let raw =
                    decode_hex(c).ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                let (a, b) = raw
                    .split_once('\u{0}')
                    .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                Some((a.to_string(), b.to_string()))
            }
            _ => None,
        };
        let inner = self.lock();
        let matching: Vec<(&(String, String), &Value)> = inner
            .objects
            .get(&def.gr())
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|want| !def.namespaced || want == n))
                    .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
                    .filter(|(_, v)| labels.matches(v) && fields.matches(v))
                    .collect()
            })
            .unwrap_or_default();
        let take = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let remaining = matching.len().saturating_sub(take);
        let items: Vec<Value> = matching
            .iter()
            .take(take)
            .map(|(_, v)| (*v).clone())
            .collect();
        let cont = (remaining > 0).then(|| {
            let (k, _) = matching[take - 1];
            encode_hex(&format!("{}\u{0}{}", k.0, k.1))
        });
        Ok(ListPage {
            items,
            rv: inner.rv,
            cont,
            remaining,
        })
    }
}

fn encode_hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::store_with_configmaps;

    #[test]
    fn continue_tokens_page_through_every_match_once() {
        let (store, def, _) = store_with_configmaps(&["c0", "c1", "c2", "c3", "c4"]);
        let (labels, fields) = (LabelSelector::default(), FieldSelector::default());
        let mut names = Vec::new();
        let mut cont: Option<String> = None;
        loop {
            let page = store
                .list(
                    &def,
                    Some("default"),
                    &labels,
                    &fields,
                    Some(2),
                    cont.as_deref(),
                )
                .unwrap();
            names.extend(page.items.iter().map(|o| o["metadata"]["name"].clone()));
            match page.cont {
                Some(next) => cont = Some(next),
                None => break,
            }
        }
        assert_eq!(names, ["c0", "c1", "c2", "c3", "c4"]);
        let err = store
            .list(&def, None, &labels, &fields, None, Some("zz"))
            .unwrap_err();
        assert_eq!(err.code, 400);
    }
}
