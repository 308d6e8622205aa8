//! Function versions: image tags read as semantic versions, and the tag constraints Porch and kpt
//! accept (`EvaluateFunctionRequest` field 3, a Kptfile step's `tag:`, FunctionConfig executor
//! `tags`), in the syntax of Go's Masterminds semver v3, which both use.
//!
//! The `semver` crate supplies versions and their precedence; its requirement syntax is Cargo's
//! (a bare `1.2.3` means `^1.2.3`, no `||`, no hyphen ranges, different pre-release rules), so
//! the constraint grammar and matching rules are Masterminds' own, implemented here:
//!
//! - alternatives joined by `||`; within one, comparisons joined by commas or spaces, all of
//!   which must hold (`>= 1.2.3, < 1.3.0`, `>=1.2.3 <1.3.0`);
//! - operators `=` (or none), `!=`, `>`, `<`, `>=` (`=>`), `<=` (`=<`), `~` (`~>`), `^`;
//! - versions with or without a leading `v`, with missing or wildcard (`x`, `X`, `*`) parts:
//!   `1.2` and `1.2.x` mean any 1.2 release, `*` any release;
//! - hyphen ranges `1.2 - 1.4.5` (`>= 1.2, <= 1.4.5`);
//! - a pre-release version satisfies a comparison only when that comparison names a
//!   pre-release itself (`>= 1.2.3-0`), so `*` and `~1.2` never pick a pre-release;
//! - an exact version is a constraint too (`v1.2.3` matches exactly 1.2.3).
//!
//! Tags are read leniently, as Masterminds' `NewVersion` does: `v1.2.3`, `1.2.3`, `v1.2` and
//! `1` are versions (missing parts are 0); `latest` or `main` are not, and no constraint
//! matches them.

use std::cmp::Ordering;
use std::fmt;

use semver::{BuildMetadata, Prerelease, Version};

/// Longest constraint accepted: constraints are written by hand, and come from callers.
pub const MAX_CONSTRAINT_LEN: usize = 256;

/// A constraint that does not parse, with the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid version constraint {text:?}: {reason}")]
pub struct InvalidConstraint {
    pub text: String,
    pub reason: String,
}

/// A parsed tag constraint. Cheap to match; parse once and keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    text: String,
    /// Alternatives (`||`), each a conjunction of comparisons.
    alternatives: Vec<Vec<Comparison>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Equal,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Tilde,
    Caret,
}

/// One comparison: an operator and a version whose trailing parts may be wildcards.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Comparison {
    op: Op,
    /// The version with wildcard parts as 0.
    version: Version,
    /// Which parts were wildcards or missing: `*` sets all three.
    any_major: bool,
    any_minor: bool,
    any_patch: bool,
}

impl Constraint {
    /// Parses `text`; the error names it and says what is wrong.
    pub fn parse(text: &str) -> Result<Self, InvalidConstraint> {
        let invalid = |reason: String| InvalidConstraint {
            text: text.to_owned(),
            reason,
        };
        if text.len() > MAX_CONSTRAINT_LEN {
            return Err(InvalidConstraint {
                text: format!("{}...", truncate(text, 40)),
                reason: format!("longer than {MAX_CONSTRAINT_LEN} bytes"),
            });
        }
        if text.trim().is_empty() {
            return Err(invalid("empty".to_owned()));
        }
        let alternatives = text
            .split("||")
            .map(parse_alternative)
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        Ok(Self {
            text: text.to_owned(),
            alternatives,
        })
    }

    /// The constraint as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `version` satisfies the constraint.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|all| all.iter().all(|comparison| comparison.matches(version)))
    }

    /// Whether the tag is a version that satisfies the constraint.
    pub fn matches_tag(&self, tag: &str) -> bool {
        parse_tag(tag).is_some_and(|version| self.matches(&version))
    }

    /// The version the constraint names when it admits exactly one (`1.2.3`, `v1.2.3`,
    /// `=1.2.3`), as written without the operator; `None` for ranges, partial versions
    /// (`1.2` is any 1.2.x) and wildcards.
    pub fn exact(&self) -> Option<&str> {
        match self.alternatives.as_slice() {
            [only] => match only.as_slice() {
                [comparison] if comparison.op == Op::Equal && !comparison.is_partial() => {
                    Some(self.text.trim().trim_start_matches('=').trim_start())
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether some version satisfies both constraints.
    ///
    /// Each comparison's set of versions is an interval, or for `!=` the outside of one,
    /// whose ends are its version or the next patch, minor or major release after it. Where
    /// several comparisons all hold, the lowest version that does is such an end of one of
    /// them (or 0.0.0), so trying those versions finds a common one when there is one.
    pub fn overlaps(&self, other: &Constraint) -> bool {
        std::iter::once(Version::new(0, 0, 0))
            .chain(
                self.comparisons()
                    .chain(other.comparisons())
                    .flat_map(Comparison::interval_ends),
            )
            .any(|version| self.matches(&version) && other.matches(&version))
    }

    fn comparisons(&self) -> impl Iterator<Item = &Comparison> {
        self.alternatives.iter().flatten()
    }

    /// The tag of the highest version among `tags` that satisfies the constraint. Tags that are
    /// not versions are skipped; of two tags naming the same version (`v1.2`, `v1.2.0`), the
    /// longer, more explicit one wins.
    pub fn best<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        tags.into_iter()
            .filter_map(|tag| Some((parse_tag(tag)?, tag)))
            .filter(|(version, _)| self.matches(version))
            .max_by(|(a, a_tag), (b, b_tag)| {
                precedence(a, b)
                    .then(a_tag.len().cmp(&b_tag.len()))
                    .then(b_tag.cmp(a_tag))
            })
            .map(|(_, tag)| tag)
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One entry of a FunctionConfig executor's `tags`: `""` and `latest` are literal tags, anything
/// else a constraint (an exact version such as `v1.2.3` being one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagEntry {
    Literal(String),
    Constraint(Constraint),
}

impl TagEntry {
    pub fn parse(text: &str) -> Result<Self, InvalidConstraint> {
        match text {
            "" | "latest" => Ok(Self::Literal(text.to_owned())),
            _ => Constraint::parse(text).map(Self::Constraint),
        }
    }

    /// Whether a request for `tag` falls under this entry: the same text, or a version the
    /// constraint admits.
    pub fn admits(&self, tag: &str) -> bool {
        match self {
            Self::Literal(literal) => literal == tag,
            Self::Constraint(constraint) => {
                constraint.as_str() == tag || constraint.matches_tag(tag)
            }
        }
    }

    /// The tag this entry names when it names exactly one (`v1.2.3`, `latest`), the candidate a
    /// requested constraint can resolve to; `None` for ranges and wildcards.
    pub fn concrete(&self) -> Option<&str> {
        match self {
            Self::Literal(literal) => Some(literal),
            Self::Constraint(constraint) => {
                parse_tag(constraint.as_str()).map(|_| constraint.as_str())
            }
        }
    }
}

/// Reads an image tag as a version (`v1.2.3`, `1.2.3-rc.1`, `v1.2`, `1`); `None` for tags
/// that are not versions (`latest`, `main`, `1.2.3.4`).
pub fn parse_tag(tag: &str) -> Option<Version> {
    let parsed = parse_version(tag).ok()?;
    if parsed.wildcard {
        return None;
    }
    Some(parsed.version)
}

/// The versions among `tags`, highest first, for messages listing what exists.
pub fn sorted_versions<'a>(tags: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut versions: Vec<(Version, &str)> = tags
        .into_iter()
        .filter_map(|tag| Some((parse_tag(tag)?, tag)))
        .collect();
    versions.sort_by(|(a, _), (b, _)| precedence(b, a));
    versions.into_iter().map(|(_, tag)| tag).collect()
}

/// The images an evaluator maps by exact name (`exec`'s executables, `wasm`'s modules), grouped
/// by repository so that a call carrying a tag constraint for an untagged image runs the mapped
/// image of that repository with the highest version satisfying it. Digest references and
/// untagged images take no part.
#[derive(Debug, Default, Clone)]
pub struct MappedVersions {
    /// By repository (the image without its tag): the mapped tags.
    tags: std::collections::HashMap<String, Vec<String>>,
}

impl MappedVersions {
    /// Groups `images` by repository.
    pub fn new<'a>(images: impl IntoIterator<Item = &'a str>) -> Self {
        let mut tags: std::collections::HashMap<String, Vec<String>> =
            std::collections::HashMap::new();
        for image in images {
            let reference = crate::ImageRef::parse(image, "");
            if reference.digest.is_some() || reference.tag.is_empty() {
                continue;
            }
            let repository = image[..image.len() - reference.tag.len() - 1].to_owned();
            tags.entry(repository).or_default().push(reference.tag);
        }
        Self { tags }
    }

    /// Whether `image` is a repository of which some tagged image is mapped.
    pub fn has_repository(&self, image: &str) -> bool {
        self.tags.contains_key(image)
    }

    /// For the untagged `image`, the mapped image with the highest version satisfying the
    /// constraint `tag`; `None` when no image of that repository is mapped. `evaluator` names
    /// the instance in the error listing the versions it maps.
    pub fn resolve(
        &self,
        evaluator: &str,
        image: &str,
        tag: &str,
    ) -> Option<Result<krm_plugin_api::Resolution, krm_plugin_api::EvalError>> {
        use krm_plugin_api::{ErrorKind, EvalError, Resolution};
        let mapped = self.tags.get(image)?;
        let constraint = match Constraint::parse(tag) {
            Ok(constraint) => constraint,
            Err(error) => return Some(Err(EvalError::invalid_input(error.to_string()))),
        };
        let tags = mapped.iter().map(String::as_str);
        let candidates: Vec<String> = sorted_versions(tags.clone())
            .into_iter()
            .map(str::to_owned)
            .collect();
        Some(match constraint.best(tags) {
            Some(chosen) => Ok(Resolution {
                image: format!("{image}:{chosen}"),
                tag: chosen.to_owned(),
                digest: None,
                candidates,
            }),
            None => Err(EvalError::new(
                ErrorKind::NotFound,
                format!(
                    "no version of {image:?} satisfies tag constraint {tag:?}: {evaluator} maps [{}]",
                    candidates.join(", ")
                ),
            )),
        })
    }
}

/// Semantic-version precedence: build metadata does not count.
fn precedence(a: &Version, b: &Version) -> Ordering {
    (a.major, a.minor, a.patch, &a.pre).cmp(&(b.major, b.minor, b.patch, &b.pre))
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(crate) fn truncate(text: &str, max: usize) -> &str {
    let cut = (0..=max.min(text.len()))
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    &text[..cut]
}

const OPERATORS: &[(&str, Op)] = &[
    // Longest first, so that `>=` is not read as `>` then `=`.
    ("~>", Op::Tilde),
    (">=", Op::GreaterEqual),
    ("=>", Op::GreaterEqual),
    ("<=", Op::LessEqual),
    ("=<", Op::LessEqual),
    ("!=", Op::NotEqual),
    (">", Op::Greater),
    ("<", Op::Less),
    ("=", Op::Equal),
    ("~", Op::Tilde),
    ("^", Op::Caret),
];

fn split_operator(word: &str) -> (Option<Op>, &str) {
    OPERATORS
        .iter()
        .find_map(|(text, op)| word.strip_prefix(text).map(|rest| (Some(*op), rest)))
        .unwrap_or((None, word))
}

fn parse_alternative(text: &str) -> Result<Vec<Comparison>, String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|word| !word.is_empty())
        .collect();
    if words.is_empty() {
        return Err("an alternative between `||` is empty".to_owned());
    }
    let mut comparisons = Vec::new();
    let mut index = 0;
    while index < words.len() {
        let (op, mut version) = split_operator(words[index]);
        index += 1;
        if version.is_empty() {
            // `>= 1.2.3`: the operator stands alone, its version is the next word.
            version = match words.get(index) {
                Some(next) if split_operator(next).0.is_none() && *next != "-" => next,
                _ => {
                    return Err(format!(
                        "operator {:?} has no version after it",
                        words[index - 1]
                    ));
                }
            };
            index += 1;
        }
        if words.get(index) == Some(&"-") {
            // A hyphen range: `1.2 - 1.4.5` is `>= 1.2, <= 1.4.5`.
            let upper = match words.get(index + 1) {
                Some(upper) if op.is_none() && split_operator(upper).0.is_none() => *upper,
                _ => return Err(format!("hyphen range after {version:?} is incomplete")),
            };
            index += 2;
            comparisons.push(Comparison::new(Op::GreaterEqual, version)?);
            comparisons.push(Comparison::new(Op::LessEqual, upper)?);
            continue;
        }
        comparisons.push(Comparison::new(op.unwrap_or(Op::Equal), version)?);
    }
    Ok(comparisons)
}

struct Parsed {
    version: Version,
    any_major: bool,
    any_minor: bool,
    any_patch: bool,
    wildcard: bool,
}

/// `v?MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]`, each number possibly a wildcard (`x`, `X`, `*`) or
/// missing; a wildcard makes every later part a wildcard.
fn parse_version(text: &str) -> Result<Parsed, String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let (rest, build) = match bare.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (bare, None),
    };
    let (numbers, pre) = match rest.split_once('-') {
        Some((numbers, pre)) => (numbers, Some(pre)),
        None => (rest, None),
    };
    let parts: Vec<&str> = numbers.split('.').collect();
    if parts.len() > 3 || parts.iter().any(|part| part.is_empty()) {
        return Err(format!("{text:?} is not a version (MAJOR[.MINOR[.PATCH]])"));
    }
    let mut values = [0u64; 3];
    let mut any = [false; 3];
    for position in 0..3 {
        let Some(part) = parts.get(position) else {
            any[position] = true;
            continue;
        };
        // After a wildcard every later part is one too: `1.x.3` reads as `1.x`.
        let after_wildcard = position > 0 && any[position - 1];
        if after_wildcard || matches!(*part, "x" | "X" | "*") {
            any[position] = true;
        } else if part.bytes().all(|b| b.is_ascii_digit()) {
            values[position] = part
                .parse()
                .map_err(|_| format!("{part:?} in {text:?} is too large"))?;
        } else {
            return Err(format!("{part:?} in {text:?} is not a number or wildcard"));
        }
    }
    let pre = match pre {
        Some("") => return Err(format!("empty pre-release after `-` in {text:?}")),
        Some(pre) => {
            Prerelease::new(pre).map_err(|e| format!("pre-release {pre:?} in {text:?}: {e}"))?
        }
        None => Prerelease::EMPTY,
    };
    let build = match build {
        Some("") => return Err(format!("empty build metadata after `+` in {text:?}")),
        Some(build) => BuildMetadata::new(build)
            .map_err(|e| format!("build metadata {build:?} in {text:?}: {e}"))?,
        None => BuildMetadata::EMPTY,
    };
    Ok(Parsed {
        version: Version {
            major: values[0],
            minor: values[1],
            patch: values[2],
            pre,
            build,
        },
        any_major: any[0],
        any_minor: any[1],
        any_patch: any[2],
        wildcard: parts.iter().any(|part| matches!(*part, "x" | "X" | "*")),
    })
}

impl Comparison {
    fn new(op: Op, text: &str) -> Result<Self, String> {
        let parsed = parse_version(text)?;
        Ok(Self {
            op,
            version: parsed.version,
            any_major: parsed.any_major,
            any_minor: parsed.any_minor,
            any_patch: parsed.any_patch,
        })
    }

    fn is_partial(&self) -> bool {
        self.any_major || self.any_minor || self.any_patch
    }

    fn matches(&self, v: &Version) -> bool {
        let c = &self.version;
        // Pre-releases only for comparisons that ask for them (Masterminds' rule).
        if !v.pre.is_empty() && c.pre.is_empty() {
            return false;
        }
        let order = precedence(v, c);
        if self.any_major {
            // `*`: everything, and nothing beyond or outside it.
            return !matches!(self.op, Op::Greater | Op::Less | Op::NotEqual);
        }
        match self.op {
            Op::Equal if self.is_partial() => self.tilde(v, order),
            Op::Equal => order == Ordering::Equal,
            Op::NotEqual if self.is_partial() => !self.tilde(v, order),
            Op::NotEqual => order != Ordering::Equal,
            Op::Greater if self.any_minor => v.major > c.major,
            Op::Greater if self.any_patch => (v.major, v.minor) > (c.major, c.minor),
            Op::Greater => order == Ordering::Greater,
            Op::Less => order == Ordering::Less,
            Op::GreaterEqual => order != Ordering::Less,
            Op::LessEqual if self.any_minor => v.major <= c.major,
            Op::LessEqual if self.any_patch => (v.major, v.minor) <= (c.major, c.minor),
            Op::LessEqual => order != Ordering::Greater,
            Op::Tilde => self.tilde(v, order),
            Op::Caret => {
                if order == Ordering::Less {
                    false
                } else if c.major > 0 || self.any_minor {
                    v.major == c.major
                } else if c.minor > 0 || self.any_patch {
                    (v.major, v.minor) == (c.major, c.minor)
                } else {
                    (v.major, v.minor, v.patch) == (c.major, c.minor, c.patch)
                }
            }
        }
    }

    /// The versions where this comparison's set of versions may start or stop: its version
    /// as written, and the next patch, minor and major release after it.
    fn interval_ends(&self) -> [Version; 4] {
        let c = &self.version;
        [
            c.clone(),
            Version::new(c.major, c.minor, c.patch.saturating_add(1)),
            Version::new(c.major, c.minor.saturating_add(1), 0),
            Version::new(c.major.saturating_add(1), 0, 0),
        ]
    }

    /// `~1.2.3`: at least 1.2.3, below 1.3.0; `~1`: any 1.x.
    fn tilde(&self, v: &Version, order: Ordering) -> bool {
        let c = &self.version;
        order != Ordering::Less && v.major == c.major && (self.any_minor || v.minor == c.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn satisfied(constraint: &str, version: &str) -> bool {
        let constraint = Constraint::parse(constraint).unwrap_or_else(|e| panic!("{e}"));
        constraint.matches_tag(version)
    }

    /// (constraint, versions that satisfy it, versions that do not)
    const CASES: &[(&str, &[&str], &[&str])] = &[
        (
            "1.2.3",
            &["1.2.3", "v1.2.3", "1.2.3+build"],
            &["1.2.4", "1.2.3-rc.1", "1.2.2"],
        ),
        ("=v1.2.3", &["1.2.3"], &["1.3.0"]),
        ("!=1.2.3", &["1.2.4", "0.1.0"], &["1.2.3", "1.2.4-rc.1"]),
        (
            ">1.2.3",
            &["1.2.4", "2.0.0"],
            &["1.2.3", "1.0.0", "1.2.4-beta"],
        ),
        ("<1.2.3", &["1.2.2", "0.0.1"], &["1.2.3", "1.2.3-rc.1"]),
        (">=1.2.3", &["1.2.3", "9.0.0"], &["1.2.2"]),
        ("=>1.2.3", &["1.2.3"], &["1.2.2"]),
        ("<=1.2.3", &["1.2.3", "1.0.0"], &["1.2.4"]),
        ("=<1.2.3", &["1.2.3"], &["1.2.4"]),
        (
            ">= 1.2.3, < 1.3.0",
            &["1.2.3", "1.2.99"],
            &["1.3.0", "1.2.2", "1.2.5-rc.1"],
        ),
        (">=1.2.3 <1.3.0", &["1.2.3"], &["1.3.0"]),
        (">=1.2.3,<1.3.0", &["1.2.9"], &["1.3.0"]),
        ("~1.2.3", &["1.2.3", "1.2.9"], &["1.3.0", "1.2.2"]),
        ("~>1.2.3", &["1.2.3"], &["1.3.0"]),
        ("~1.2", &["1.2.0", "1.2.9"], &["1.3.0", "1.1.9"]),
        ("~1", &["1.0.0", "1.9.9"], &["2.0.0", "0.9.0"]),
        (
            "~0.4.3",
            &["0.4.3", "0.4.10", "v0.4.5"],
            &["0.5.0", "0.4.2"],
        ),
        ("^1.2.3", &["1.2.3", "1.9.0"], &["2.0.0", "1.2.2"]),
        ("^0.2.3", &["0.2.3", "0.2.9"], &["0.3.0"]),
        ("^0.0.3", &["0.0.3"], &["0.0.4", "0.1.0"]),
        ("^0", &["0.0.0", "0.9.9"], &["1.0.0"]),
        ("^0.0", &["0.0.9"], &["0.1.0"]),
        ("^1.x", &["1.0.0", "1.9.0"], &["2.0.0"]),
        ("1.2.x", &["1.2.0", "1.2.7"], &["1.3.0"]),
        ("1.2.*", &["1.2.7"], &["1.3.0"]),
        ("1.X", &["1.0.0", "1.7.0"], &["2.0.0"]),
        ("v1.2", &["1.2.0", "1.2.7"], &["1.3.0"]),
        ("1", &["1.0.0", "1.5.0"], &["2.0.0"]),
        (
            "*",
            &["0.0.1", "1.0.0", "99.1.2"],
            &["1.0.0-alpha", "latest"],
        ),
        ("x", &["3.1.4"], &["3.1.4-rc.1"]),
        (">1.2.x", &["1.3.0", "2.0.0"], &["1.2.9"]),
        (">1.x", &["2.0.0"], &["1.9.0"]),
        ("<=1.2.x", &["1.2.9", "0.1.0"], &["1.3.0"]),
        ("<=1.x", &["1.9.9"], &["2.0.0"]),
        ("!=1.2.x", &["1.3.0", "1.1.0"], &["1.2.5"]),
        ("1.2 - 1.4.5", &["1.2.0", "1.4.5"], &["1.4.6", "1.1.9"]),
        ("1.2.3 - 1.4", &["1.2.3", "1.4.9"], &["1.5.0"]),
        (
            "~1.2 || >=3",
            &["1.2.5", "3.0.0", "4.1.0"],
            &["2.0.0", "1.3.0"],
        ),
        ("<1 || 1.5.0", &["0.9.0", "1.5.0"], &["1.4.0"]),
        (">=1.2.3-0", &["1.2.3-alpha", "1.2.3", "2.0.0"], &["1.2.2"]),
        (
            "~1.2.3-beta",
            &["1.2.3-beta", "1.2.3-beta.2", "1.2.3"],
            &["1.2.3-alpha", "1.3.0"],
        ),
        ("1.2.3-rc.1", &["v1.2.3-rc.1"], &["1.2.3-rc.2", "1.2.3"]),
        (">=1.2.3-alpha, <1.3.0", &["1.2.3"], &["1.2.4-beta"]),
    ];

    #[test]
    fn masterminds_constraints_match_as_in_porch_and_kpt() {
        for (constraint, good, bad) in CASES {
            for version in *good {
                assert!(
                    satisfied(constraint, version),
                    "{constraint} should match {version}"
                );
            }
            for version in *bad {
                assert!(
                    !satisfied(constraint, version),
                    "{constraint} should not match {version}"
                );
            }
        }
    }

    #[test]
    fn malformed_constraints_are_refused_naming_the_text() {
        for (text, reason) in [
            ("", "empty"),
            ("   ", "empty"),
            ("1.2.3 ||", "empty"),
            (">=", "no version after"),
            ("1.2.3.4", "not a version"),
            ("1..2", "not a version"),
            ("banana", "not a number"),
            (">=1.2.3 <", "no version after"),
            ("1.2 -", "incomplete"),
            (">1 - 2", "incomplete"),
            ("1 - >2", "incomplete"),
            ("1.2.3-", "pre-release"),
            ("1.2.3-01", "pre-release"),
            ("1.2.3+", "build metadata"),
            ("99999999999999999999999", "too large"),
            ("latest", "not a number"),
        ] {
            let error = Constraint::parse(text).expect_err(text);
            assert_eq!(error.text, text);
            assert!(error.reason.contains(reason), "{text}: {error}");
            assert!(error.to_string().starts_with("invalid version constraint"));
        }
        let long = "1".repeat(MAX_CONSTRAINT_LEN + 1);
        let error = Constraint::parse(&long).unwrap_err();
        assert!(error.reason.contains("longer than"), "{error}");
        assert!(error.text.len() < 50, "{error}");
    }

    #[test]
    fn the_highest_satisfying_tag_wins() {
        let tags = [
            "latest",
            "v0.4.1",
            "v0.4.5",
            "v0.4.10",
            "v0.5.0",
            "v0.4.11-rc.1",
            "v0.4",
            "main",
        ];
        let pick = |constraint: &str| Constraint::parse(constraint).unwrap().best(tags);
        assert_eq!(pick("~0.4.3"), Some("v0.4.10"));
        assert_eq!(pick("~0.4.0"), Some("v0.4.10"));
        assert_eq!(pick("*"), Some("v0.5.0"));
        assert_eq!(pick(">=0.4.11-0"), Some("v0.5.0"));
        assert_eq!(pick("~0.4.11-0"), Some("v0.4.11-rc.1"));
        assert_eq!(pick("v0.4.1"), Some("v0.4.1"));
        assert_eq!(pick("0.4.0"), Some("v0.4"));
        assert_eq!(pick("^1"), None);
        // Equal versions: the explicit spelling.
        let same = Constraint::parse("1.2")
            .unwrap()
            .best(["v1.2", "v1.2.0", "1.2"]);
        assert_eq!(same, Some("v1.2.0"));
    }

    #[test]
    fn constraints_overlap_when_some_version_satisfies_both() {
        let overlap = |a: &str, b: &str| {
            let (a, b) = (Constraint::parse(a).unwrap(), Constraint::parse(b).unwrap());
            assert_eq!(a.overlaps(&b), b.overlaps(&a), "{a} and {b} both ways");
            a.overlaps(&b)
        };
        for (a, b) in [
            (">= 1.0.0, < 2.0.0", "1.4.2"),
            (">= 1.0.0, < 2.0.0", "v1.4.2"),
            (">= 1.0.0, < 2.0.0", "~1.4.0"),
            (">= 1.0.0, < 2.0.0", "^1.9"),
            (">= 1.0.0, < 2.0.0", "< 1.0.1"),
            (">= 1.0.0, < 2.0.0", "*"),
            ("~1.2 || >=3", "2.5.0 - 3.0.0"),
            ("!=1.2.3", "1.2.3 - 1.2.4"),
            ("!=1.2.x", "~1.2 || ~1.3"),
            (">1.2.3", ">= 1.2.0, < 1.2.5"),
            (">1.2.x", "<= 1.3.0"),
            ("<1", "^0.0"),
            (">=1.2.3-0", "1.2.3-rc.1"),
        ] {
            assert!(overlap(a, b), "{a} and {b} overlap");
        }
        for (a, b) in [
            (">= 1.0.0, < 2.0.0", "2.0.0"),
            (">= 1.0.0, < 2.0.0", "~2.1"),
            (">= 1.0.0, < 2.0.0", "<1"),
            (">= 1.0.0, < 2.0.0", "1.4.2-rc.1"),
            ("!=1.2.3", "1.2.3"),
            ("!=1.2.x", "~1.2.4"),
            (">1.2.3", "<= 1.2.3"),
            ("^0.0.3", "0.0.4"),
            ("~1.2 || >=3", "1.3.0 - 2.9.9"),
        ] {
            assert!(!overlap(a, b), "{a} and {b} do not overlap");
        }
    }

    #[test]
    fn a_constraint_naming_one_version_says_which() {
        let exact = |text: &str| Constraint::parse(text).unwrap().exact().map(str::to_owned);
        assert_eq!(exact("1.4.2").as_deref(), Some("1.4.2"));
        assert_eq!(exact("v1.4.2").as_deref(), Some("v1.4.2"));
        assert_eq!(exact("= v1.4.2-rc.1").as_deref(), Some("v1.4.2-rc.1"));
        for range in ["1.4", "~1.4.2", ">= 1.4.2", "1.4.2 || 1.4.3", "1.x", "*"] {
            assert_eq!(exact(range), None, "{range}");
        }
    }

    #[test]
    fn function_config_tag_entries() {
        let entry = |text: &str| TagEntry::parse(text).unwrap();
        assert!(entry("").admits(""));
        assert!(!entry("").admits("v1.0.0"));
        assert!(entry("latest").admits("latest"));
        assert!(!entry("*").admits("latest"));
        assert!(entry("*").admits("v3.2.1"));
        assert!(!entry("*").admits("v3.2.1-rc.1"));
        assert!(entry("v1").admits("v1"));
        assert!(entry("v1").admits("v1.4.0"));
        assert!(entry("~0.4.1").admits("v0.4.9"));
        assert_eq!(entry("v0.4.1").concrete(), Some("v0.4.1"));
        assert_eq!(entry("latest").concrete(), Some("latest"));
        assert_eq!(entry("~0.4.1").concrete(), None);
        assert_eq!(entry("v1.x").concrete(), None);
        assert!(TagEntry::parse("main").is_err());
    }

    #[test]
    fn tags_read_as_versions_leniently() {
        assert_eq!(parse_tag("v1.2.3"), Some(Version::new(1, 2, 3)));
        assert_eq!(parse_tag("v1.2"), Some(Version::new(1, 2, 0)));
        assert_eq!(parse_tag("7"), Some(Version::new(7, 0, 0)));
        assert_eq!(parse_tag("1.2.3-rc.1").unwrap().pre.as_str(), "rc.1");
        for tag in [
            "latest",
            "",
            "v",
            "1.x",
            "*",
            "1.2.3.4",
            "sha256:abc",
            "v1.2.3-",
        ] {
            assert_eq!(parse_tag(tag), None, "{tag}");
        }
        assert_eq!(
            sorted_versions(["v0.1.0", "latest", "v0.10.0", "v0.2.0", "v0.10.0-rc.1"]),
            ["v0.10.0", "v0.10.0-rc.1", "v0.2.0", "v0.1.0"]
        );
    }
}
