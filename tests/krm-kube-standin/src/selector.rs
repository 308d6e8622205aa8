//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!exists`) and field selectors
//! (`=`, `==`, `!=` on any dotted path; `metadata.name`, `metadata.namespace`, `status.phase`,
//! `spec.nodeName` are what clients use).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn check_key(k: &str) -> Result<String, String> {
    let k = k.trim();
    if k.is_empty()
        || !k
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
    {
        return Err(format!("invalid label key {k:?}"));
    }
    Ok(k.to_string())
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter syntax.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_top_level(s) {
            let term = term.trim();
            if term.is_empty() {
                return Err(format!("empty requirement in selector {s:?}"));
            }
            if let Some(rest) = term.strip_prefix('!') {
                reqs.push(Req::NotExists(check_key(rest)?));
            } else if let Some(open) = term.find('(') {
                let close = term
                    .rfind(')')
                    .ok_or_else(|| format!("unclosed '(' in {term:?}"))?;
                let head: Vec<&str> = term[..open].split_whitespace().collect();
                let values: Vec<String> = term[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                match head.as_slice() {
                    [k, "in"] => reqs.push(Req::In(check_key(k)?, values)),
                    [k, "notin"] => reqs.push(Req::NotIn(check_key(k)?, values)),
                    _ => return Err(format!("invalid set requirement {term:?}")),
                }
            } else if let Some((k, v)) = term.split_once("!=") {
                reqs.push(Req::NotEq(check_key(k)?, v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once("==") {
                reqs.push(Req::Eq(check_key(k)?, v.trim().to_string()));
            } else if let Some((k, v)) = term.split_once('=') {
                reqs.push(Req::Eq(check_key(k)?, v.trim().to_string()));
            } else {
                reqs.push(Req::Exists(check_key(term)?));
            }
        }
        Ok(Self(reqs))
    }

    /// A selector from a `matchLabels`-style map (services' `spec.selector`).
    pub fn from_map(map: &serde_json::Map<String, Value>) -> Self {
        Self(
            map.iter()
                .map(|(k, v)| Req::Eq(k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect(),
        )
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Matches the object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `a.b=x,c!=y`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(out));
        }
        for term in s.split(',') {
            let term = term.trim();
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector {term:?}"));
            };
            let k = k.trim();
            if k.is_empty() {
                return Err(format!("invalid field selector {term:?}"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(Self(out))
    }

    /// The value required for `metadata.name`, when the selector pins it.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Matches the field values of the object (missing fields compare as `""`).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let actual = match crate::util::path(obj, k) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_operators() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app!=db"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("missing notin (web)"));
        assert!(!m("missing in (web)"));
        assert!(m("tier"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("app in (web),tier=front,!missing"));
        assert!(!m("app in (web),tier=back"));
        assert!(LabelSelector::parse("app in (a").is_err());
        assert!(LabelSelector::parse("a,,b").is_err());
    }

    #[test]
    fn field_selector_paths() {
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.namespace==ns,status.phase=Running"));
        assert!(!m("status.phase!=Running"));
        assert!(m("spec.nodeName="));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
