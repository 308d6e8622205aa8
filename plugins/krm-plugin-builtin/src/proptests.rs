//! Property tests that keep the YAML layer honest: the fast path against the general parser,
//! the functions' edits, and hostile bytes. `cargo test` runs a bounded number of cases
//! (proptest's default, 256); `PROPTEST_CASES=100000 cargo test --release -p
//! krm-plugin-builtin proptests` runs the long search (see docs/security.md).

use proptest::prelude::*;

use crate::functions::{FUNCTIONS, Limits};
use crate::yaml::{Doc, Stop, TopLevel};

/// A generated YAML value, rendered in block style by [`render`].
#[derive(Debug, Clone)]
enum Value {
    Scalar(String),
    Map(Vec<(String, Value)>),
    Seq(Vec<Value>),
}

/// How a document is written: the choices a person or a tool makes.
#[derive(Debug, Clone)]
struct Style {
    /// Spaces per level (2 or 4).
    indent: usize,
    /// Sequences under a key at the key's column (`key:\n- a`), as kubectl writes them.
    indentless: bool,
    /// Separator after a key's colon, chosen per entry from this list by index.
    separators: Vec<&'static str>,
    /// A comment after some values.
    comments: bool,
    /// Blank lines between some entries.
    blank_lines: bool,
}

/// What manifests mostly hold: words, numbers, quoted strings.
fn common_scalar() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "[a-z][a-z0-9.-]{0,8}",
        2 => "[0-9]{1,4}",
        1 => "'[a-z :#-]{0,6}'",
        1 => "\"[a-z :#-]{0,6}\"",
    ]
    .boxed()
}

/// Besides those, edge cases, some of which send a document to the general parser.
fn any_scalar() -> BoxedStrategy<String> {
    prop_oneof![
        4 => common_scalar(),
        1 => prop::sample::select(vec![
            "true", "null", "~", "", "\"\\\"q\\\\\"", "'it''s'", "a b", "nginx:1.25",
            "http://x:80/y", "-x", "é ü", "[x, y]", "{k: v}", "|\n  text", "&a x", "a #b",
            "|-\n  line one\n\n  line two", "|+\n  kept\n", "|  # note\n  a: b\n    - c",
            "|\n  #!/bin/sh\n   echo \"$1\"", ">\n  folded",
        ])
        .prop_map(str::to_owned),
    ]
    .boxed()
}

fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-z][a-zA-Z0-9]{0,6}",
        1 => "\"[a-z ]{1,5}\"",
        1 => "'[a-z:]{1,5}'",
        1 => Just("app.kubernetes.io/name".to_owned()),
    ]
}

fn value(scalars: BoxedStrategy<String>) -> impl Strategy<Value = Value> {
    scalars
        .prop_map(Value::Scalar)
        .prop_recursive(5, 48, 5, |inner| {
            prop_oneof![
                3 => prop::collection::vec((key_text(), inner.clone()), 1..5).prop_map(Value::Map),
                1 => prop::collection::vec(inner, 1..4).prop_map(Value::Seq),
            ]
        })
}

fn style() -> impl Strategy<Value = Style> {
    (
        prop_oneof![Just(2usize), Just(4usize)],
        any::<bool>(),
        prop::collection::vec(
            prop_oneof![8 => Just(" "), 1 => Just("\t"), 1 => Just("  "), 1 => Just(" \t")],
            1..6,
        ),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(indent, indentless, separators, comments, blank_lines)| Style {
                indent,
                indentless,
                separators,
                comments,
                blank_lines,
            },
        )
}

/// Writes `value` as the content at `col`; `inline` when it continues a `- ` or `key: ` line.
fn render(value: &Value, style: &Style, col: usize, out: &mut String, counter: &mut usize) {
    *counter += 1;
    let pad = " ".repeat(col);
    match value {
        Value::Scalar(text) => {
            out.push_str(&text.replace('\n', &format!("\n{pad}")));
            if style.comments && (*counter).is_multiple_of(3) {
                out.push_str(" # c");
            }
            out.push('\n');
        }
        Value::Map(entries) => {
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    if style.blank_lines && (*counter).is_multiple_of(4) {
                        out.push('\n');
                    }
                    out.push_str(&pad);
                }
                out.push_str(key);
                out.push(':');
                match value {
                    Value::Scalar(_) => {
                        out.push_str(style.separators[*counter % style.separators.len()]);
                        render(value, style, col + style.indent, out, counter);
                    }
                    Value::Map(_) => {
                        out.push('\n');
                        let inner = col + style.indent;
                        out.push_str(&" ".repeat(inner));
                        render(value, style, inner, out, counter);
                    }
                    Value::Seq(_) => {
                        out.push('\n');
                        let inner = if style.indentless {
                            col
                        } else {
                            col + style.indent
                        };
                        out.push_str(&" ".repeat(inner));
                        render(value, style, inner, out, counter);
                    }
                }
            }
        }
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&pad);
                }
                out.push_str("- ");
                render(item, style, col + 2, out, counter);
            }
        }
    }
}

/// A document whose root is a mapping, as every KRM object is; most hold only common scalars.
fn document() -> impl Strategy<Value = String> {
    let root =
        |scalars| prop::collection::vec((key_text(), value(scalars)), 1..6).prop_map(Value::Map);
    let root = prop_oneof![2 => root(common_scalar()), 1 => root(any_scalar())];
    (root, style()).prop_map(|(value, style)| {
        let mut out = String::new();
        render(&value, &style, 0, &mut out, &mut 0);
        out
    })
}

/// A stream of documents, with the separators units, kustomize and `kubectl get -o yaml`
/// write (and `...` ends), as the parts it is made of.
#[derive(Debug, Clone)]
struct Stream {
    documents: Vec<String>,
    head: &'static str,
    separators: Vec<&'static str>,
    tail: &'static str,
}

impl Stream {
    fn text(&self) -> String {
        let mut out = self.head.to_owned();
        for (i, document) in self.documents.iter().enumerate() {
            if i > 0 {
                out.push_str(self.separators[i % self.separators.len()]);
            }
            out.push_str(document);
        }
        out.push_str(self.tail);
        out
    }
}

fn stream() -> impl Strategy<Value = Stream> {
    (
        prop::collection::vec(document(), 1..5),
        prop::sample::select(vec!["", "---\n", "# head\n\n---\n", "--- # first\n"]),
        prop::collection::vec(
            prop::sample::select(vec![
                "---\n",
                "\n---\n",
                "--- # next\n",
                "---   \n",
                "# between\n---\n",
                "...\n---\n",
                "...\n",
                "---\n---\n",
            ]),
            1..4,
        ),
        prop::sample::select(vec!["", "---\n", "...\n", "---\n# end\n", "---\n---\n"]),
    )
        .prop_map(|(documents, head, separators, tail)| Stream {
            documents,
            head,
            separators,
            tail,
        })
}

/// Small edits where YAML is most fragile.
fn mutated(text: String) -> impl Strategy<Value = String> {
    let len = text.len();
    prop::collection::vec(
        (
            0..=len,
            prop_oneof![
                Just(""),
                Just(" "),
                Just("\t"),
                Just("\n"),
                Just(":"),
                Just("- "),
                Just("#"),
                Just("'"),
                Just("\""),
                Just("["),
                Just("{"),
                Just("&a "),
                Just("*a"),
                Just("---\n"),
                Just("\r"),
            ],
            0..3usize,
        ),
        0..4,
    )
    .prop_map(move |edits| {
        let mut out = text.clone();
        for (at, insert, delete) in edits {
            let mut at = at.min(out.len());
            while !out.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + delete).min(out.len());
            while !out.is_char_boundary(end) {
                end += 1;
            }
            out.replace_range(at..end, insert);
        }
        out
    })
}

fn limits() -> Limits {
    Limits {
        stop: Stop::default(),
        max_output_bytes: 6 << 20,
    }
}

/// The fast path's tree is the general parser's, or the fast path declines.
fn same_tree_or_declined(src: &str) -> Result<(), TestCaseError> {
    let general = Doc::parse_general(src);
    if let Some(fast) = crate::yaml::fast::parse(src, &Stop::default()) {
        let general = general.as_ref().map_err(|e| {
            TestCaseError::fail(format!(
                "fast path accepted what saphyr refuses ({e}): {src:?}"
            ))
        })?;
        if let Some(difference) = fast.difference(general) {
            return Err(TestCaseError::fail(format!("{difference} of {src:?}")));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_matches_the_general_parser(src in document()) {
        same_tree_or_declined(&src)?;
    }

    #[test]
    fn fast_path_matches_the_general_parser_on_mutations(src in document().prop_flat_map(mutated)) {
        same_tree_or_declined(&src)?;
        // Whichever parser takes it, the verdict is the general parser's.
        let general = Doc::parse_general(&src).and_then(|doc| doc.check_unique_keys());
        prop_assert_eq!(Doc::parse(&src).is_ok(), general.is_ok(), "{:?}", src);
    }

    #[test]
    fn fast_path_matches_the_general_parser_on_streams(stream in stream()) {
        same_tree_or_declined(&stream.text())?;
    }

    #[test]
    fn fast_path_takes_streams_of_documents_it_takes_alone(stream in stream()) {
        let alone = |src: &str| crate::yaml::fast::parse(src, &Stop::default()).is_some();
        if stream.documents.iter().all(|document| alone(document)) {
            prop_assert!(alone(&stream.text()), "declined {:?}", stream.text());
        }
    }

    #[test]
    fn fast_path_matches_the_general_parser_on_mutated_streams(
        src in stream().prop_flat_map(|stream| mutated(stream.text()))
    ) {
        same_tree_or_declined(&src)?;
        let general = Doc::parse_general(&src).and_then(|doc| doc.check_unique_keys());
        prop_assert_eq!(Doc::parse(&src).is_ok(), general.is_ok(), "{:?}", src);
    }

    #[test]
    fn a_top_level_reading_is_the_parsers_and_its_edit_keeps_the_rest(
        src in prop_oneof![document(), document().prop_flat_map(mutated)]
    ) {
        let (Some(top), Ok(doc)) = (TopLevel::scan(&src), Doc::parse(&src)) else {
            // Declined, or not YAML: the caller parses it and reports what the parse says.
            return Ok(());
        };
        let root = doc.roots[0];
        prop_assert!(doc.is_map(root), "{:?}", src);
        let key_of = |doc: &Doc, key| doc.str(key).unwrap_or_default().to_owned();
        let keys: Vec<String> = doc.entries(root).iter().map(|&(key, _)| key_of(&doc, key)).collect();
        prop_assert_eq!(top.keys().collect::<Vec<_>>(), keys.clone(), "{:?}", src);
        for &(key, value) in doc.entries(root) {
            if let Some(plain) = top.plain_scalar(&key_of(&doc, key)) {
                prop_assert_eq!(doc.str(value), Some(plain), "{:?}", src);
            }
        }
        let config = "apiVersion: v1\nkind: ConfigMap\ndata:\n  k: v\n";
        let (range, text) = top.mapping_edit("functionConfig", config).expect("a plain mapping");
        let mut edited = src.clone();
        edited.replace_range(range, &text);
        let edited_doc = Doc::parse(&edited)
            .map_err(|e| TestCaseError::fail(format!("{e}: {edited:?} from {src:?}")))?;
        let edited_root = edited_doc.roots[0];
        prop_assert_eq!(edited_doc.get_str(edited_root, &["functionConfig", "data", "k"]), Some("v"));
        let mut expected = keys.clone();
        if !expected.iter().any(|key| key == "functionConfig") {
            expected.push("functionConfig".to_owned());
        }
        let edited_keys: Vec<String> = edited_doc
            .entries(edited_root)
            .iter()
            .map(|&(key, _)| key_of(&edited_doc, key))
            .collect();
        prop_assert_eq!(edited_keys, expected, "{:?}", edited);
        for key in keys.iter().filter(|key| *key != "functionConfig") {
            prop_assert_eq!(
                edited_doc.get_str(edited_root, &[key]),
                doc.get_str(root, &[key]),
                "{} in {:?}", key, edited
            );
        }
    }

    #[test]
    fn resource_list_parsing_never_panics_and_errors_stay_short(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            (document(), document())
                .prop_flat_map(|(item, config)| mutated(resource_list(&[item], &indented(&config))))
                .prop_map(String::into_bytes),
        ]
    ) {
        for function in FUNCTIONS {
            let outcome = krm_catalog_function::run(function, &bytes, &limits());
            if let Err(error) = outcome {
                prop_assert!(error.message.len() < 2048, "{}: {} bytes of message", function.name, error.message.len());
            }
        }
    }

    #[test]
    fn edits_parse_and_leave_untouched_documents_byte_identical(
        objects in prop::collection::vec((krm_object(), any::<bool>()), 1..6),
        function in 0..4usize,
    ) {
        let (name, config) = [
            ("set-labels", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {team: blue}}"),
            ("set-annotations", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {owner: ops}}"),
            ("set-namespace", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {namespace: prod}}"),
            ("set-image", "{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {name: nginx, newTag: '2'}}"),
        ][function];
        // set-labels and set-namespace never edit local-config objects; set-image edits only
        // objects with an nginx container.
        let documents: Vec<String> = objects
            .iter()
            .map(|(object, local)| if *local { local_config(object) } else { object.clone() })
            .collect();
        let input = resource_list(&documents, &format!("  {config}\n"));
        let output = crate::run_function(name, input.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("{name}: {e:?}\n{input}")))?;
        let output = String::from_utf8(output.resource_list).expect("UTF-8 out");
        let before = crate::rl::ResourceList::parse(input.as_bytes(), &Stop::default()).expect("input parses");
        let after = crate::rl::ResourceList::parse(output.as_bytes(), &Stop::default())
            .map_err(|e| TestCaseError::fail(format!("{name} output does not parse ({e}):\n{output}")))?;
        prop_assert_eq!(before.items.len(), after.items.len());
        for (i, ((_, local), (&b, &a))) in objects.iter().zip(before.items.iter().zip(&after.items)).enumerate() {
            let text = |rl: &crate::rl::ResourceList, id| {
                let node = rl.doc.node(id);
                rl.doc.src[node.start()..node.end()].to_owned()
            };
            let untouched = match name {
                "set-labels" | "set-namespace" => *local,
                "set-image" => !text(&before, b).contains("image: nginx"),
                _ => false,
            };
            if untouched {
                prop_assert_eq!(text(&before, b), text(&after, a), "{} changed item {}", name, i);
            }
        }
    }
}

/// A ResourceList holding `documents` (each block YAML at column 0) and `config` lines.
fn resource_list(documents: &[String], config: &str) -> String {
    let mut out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    for document in documents {
        for (i, line) in document.lines().enumerate() {
            out.push_str(if i == 0 { "- " } else { "  " });
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("functionConfig:\n");
    out.push_str(config);
    if !config.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn indented(document: &str) -> String {
    document.lines().map(|line| format!("  {line}\n")).collect()
}

fn local_config(object: &str) -> String {
    object.replacen(
        "metadata:\n",
        "metadata:\n  annotations:\n    config.kubernetes.io/local-config: \"true\"\n",
        1,
    )
}

/// A KRM object as people write them: comments, quoting and key order vary.
fn krm_object() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("Deployment"), Just("Service"), Just("ConfigMap"), Just("Pod")],
        "[a-z]{1,6}",
        prop::option::of("[a-z]{1,6}"),
        prop::collection::vec(("[a-z]{1,5}", any_scalar()), 0..3),
        any::<bool>(),
        prop_oneof![Just("nginx"), Just("redis"), Just("nginx:1.25")],
    )
        .prop_map(|(kind, name, namespace, data, comment, image)| {
            let comment = if comment { " # keep me" } else { "" };
            let mut out = format!(
                "apiVersion: {}\nkind: {kind}\nmetadata:\n  name: {name}{comment}\n",
                if kind == "Deployment" { "apps/v1" } else { "v1" }
            );
            if let Some(namespace) = namespace {
                out.push_str(&format!("  namespace: '{namespace}'\n"));
            }
            match kind {
                "Deployment" => out.push_str(&format!(
                    "spec:\n  template:\n    spec:\n      containers:\n      - name: c\n        image: {image}\n"
                )),
                "Pod" => out.push_str(&format!("spec:\n  containers:\n  - name: c\n    image: {image}\n")),
                _ => {}
            }
            if !data.is_empty() {
                out.push_str("data:\n");
                let mut seen = std::collections::HashSet::new();
                for (key, value) in data {
                    if seen.insert(key.clone()) && !value.contains('\n') {
                        out.push_str(&format!("  {key}: {value}\n"));
                    }
                }
            }
            out
        })
}
