use super::*;

fn edit(src: &str, f: impl FnOnce(&Doc, &mut Editor)) -> String {
    let doc = Doc::parse(src).unwrap();
    let mut editor = Editor::default();
    f(&doc, &mut editor);
    editor.finish(&doc)
}

#[test]
fn spans_and_insertions_keep_everything_else() {
    let src = "a: 1 # one\nm:\n  k: v   # keep\n\n  # trailing\nz: 'q'\n";
    let out = edit(src, |doc, ed| {
        let root = doc.roots[0];
        let m = doc.get(root, "m").unwrap();
        ed.ensure_map(doc, m, &[], &[("nk".into(), "3".into())], true);
        ed.set_scalar(doc, doc.get(root, "z").unwrap(), "it's", true);
    });
    assert_eq!(
        out,
        "a: 1 # one\nm:\n  k: v   # keep\n  nk: \"3\"\n\n  # trailing\nz: 'it''s'\n"
    );
}

#[test]
fn creates_missing_and_null_maps_once() {
    let src = "metadata:\n  name: x\nspec:\n";
    let out = edit(src, |doc, ed| {
        let root = doc.roots[0];
        let md = doc.get(root, "metadata").unwrap();
        ed.ensure_map(doc, md, &["labels"], &[("a".into(), "b".into())], true);
        ed.ensure_map(doc, md, &["labels"], &[("c".into(), "true".into())], true);
        ed.ensure_map(doc, root, &["spec", "x"], &[("d".into(), "e".into())], true);
    });
    assert_eq!(
        out,
        "metadata:\n  name: x\n  labels:\n    a: b\n    c: \"true\"\nspec:\n  x:\n    d: e\n"
    );
}

#[test]
fn insertions_meeting_at_one_spot_close_the_inner_node_first() {
    // Each new item is queued before the entries that go into the item above it, and all of
    // them meet at the start of a line: the entries must still land in their own item.
    let src = "items:\n- metadata:\n    name: a\n- metadata:\n    name: b\n";
    let out = edit(src, |doc, ed| {
        let items = doc.get(doc.roots[0], "items").unwrap();
        let [a, b] = doc.items(items)[..] else {
            panic!("two items")
        };
        let new = |name: &str| New::Map(vec![("name".into(), New::str(name))]);
        ed.insert_items_at(
            doc,
            items,
            doc.line_start(doc.node(b).start()),
            &[new("mid")],
        );
        ed.append_item(doc, items, new("last"));
        for item in [a, b] {
            let metadata = doc.get(item, "metadata").unwrap();
            ed.insert(
                doc,
                metadata,
                "labels",
                New::Map(vec![("k".into(), New::str("v"))]),
            );
        }
    });
    assert_eq!(
        out,
        "items:\n- metadata:\n    name: a\n    labels:\n      k: v\n- name: mid\n\
         - metadata:\n    name: b\n    labels:\n      k: v\n- name: last\n"
    );
}

#[test]
fn flow_maps_stay_flow() {
    let src = "{\"metadata\": {\"name\": \"x\"}, \"l\": {}}";
    let out = edit(src, |doc, ed| {
        let root = doc.roots[0];
        let md = doc.get(root, "metadata").unwrap();
        ed.ensure_map(doc, md, &["labels"], &[("a".into(), "b".into())], true);
        ed.ensure_map(doc, root, &["l"], &[("c".into(), "d".into())], true);
    });
    assert_eq!(
        out,
        "{\"metadata\": {\"name\": \"x\", \"labels\": {\"a\": \"b\"}}, \"l\": {\"c\": \"d\"}}"
    );
}

#[test]
fn non_ascii_offsets() {
    let src = "é: \"ü\"\nk: v\n";
    let out = edit(src, |doc, ed| {
        ed.set_scalar(doc, doc.get(doc.roots[0], "k").unwrap(), "ö", true);
    });
    assert_eq!(out, "é: \"ü\"\nk: ö\n");
}

#[test]
fn sequence_nodes_start_at_the_dash() {
    let src = "a:\n  - x\n  - y\nb:\n- p: 1\n  q: 2\n";
    let doc = Doc::parse(src).unwrap();
    let a = doc.get(doc.roots[0], "a").unwrap();
    assert_eq!(&src[doc.node(a).start()..doc.node(a).end()], "- x\n  - y");
    assert_eq!(doc.node(a).col(), 2);
    let b = doc.get(doc.roots[0], "b").unwrap();
    assert_eq!(doc.node(b).col(), 0);
    let item = doc.items(b)[0];
    assert_eq!(doc.node(item).col(), 2);
}

#[test]
fn quoted_and_flow_spans_stop_before_comments() {
    let src = "a: \"1\" # c\nb: 'it''s' # d\nc: [x] # e\nd: {y: z} # f\n";
    let doc = Doc::parse(src).unwrap();
    let text = |k: &str| {
        let n = doc.node(doc.get(doc.roots[0], k).unwrap());
        &src[n.start()..n.end()]
    };
    assert_eq!(text("a"), "\"1\"");
    assert_eq!(text("b"), "'it''s'");
    assert_eq!(text("c"), "[x]");
    assert_eq!(text("d"), "{y: z}");
}

fn laughs(levels: usize) -> String {
    let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for level in 1..levels {
        let items = vec![format!("*a{}", level - 1); 9].join(", ");
        src.push_str(&format!("a{level}: &a{level} [{items}]\n"));
    }
    src
}

#[test]
fn alias_expansion_is_bounded() {
    // Three levels (729 copies) are fine; eight (43 million) are a bomb.
    assert!(Doc::parse(&laughs(3)).is_ok());
    let error = Doc::parse(&laughs(8)).err().unwrap().to_string();
    assert!(error.contains("refused as an alias bomb"), "{error}");
    // One big anchored scalar copied many times is a bomb too.
    let big = format!(
        "a: &a {}\nb: [{}]\n",
        "x".repeat(100_000),
        vec!["*a"; 30].join(", ")
    );
    assert!(matches!(
        Doc::parse(&big),
        Err(ParseError::AliasBomb { .. })
    ));
    let many = format!("a: &a x\nb: [{}]\n", vec!["*a"; MAX_ALIASES + 1].join(", "));
    let error = Doc::parse(&many).err().unwrap().to_string();
    assert!(error.starts_with("more than 10000 aliases"), "{error}");
}

#[test]
fn recursive_aliases_are_refused() {
    for src in ["a: &a [*a]\n", "a: &a {b: *a}\n", "- &x\n  - *x\n"] {
        let error = Doc::parse(src).err().unwrap().to_string();
        assert!(
            error.contains("refers to a node that contains it"),
            "{src:?}: {error}"
        );
    }
}

#[test]
fn duplicate_keys_are_refused_with_their_position() {
    for (src, expected) in [
        (
            "a: 1\nb: 2\na: 3\n",
            "duplicate mapping key \"a\" at line 3 column 1 (first at line 1 column 1)",
        ),
        (
            "m: {k: 1, 'k': 2}\n",
            "duplicate mapping key \"k\" at line 1 column 11 (first at line 1 column 5)",
        ),
        (
            "x:\n  - é: 1\n    é: 2\n",
            "duplicate mapping key \"é\" at line 3 column 5 (first at line 2 column 5)",
        ),
        // The outer mapping comes first in the document, though the inner one is read first.
        (
            "a: 1\nm:\n  k: 1\n  k: 2\na: 2\n",
            "duplicate mapping key \"a\" at line 5 column 1 (first at line 1 column 1)",
        ),
    ] {
        assert_eq!(
            Doc::parse(src).err().map(|e| e.to_string()).as_deref(),
            Some(expected),
            "{src:?}"
        );
    }
    let wide: String = (0..100).map(|i| format!("k{i}: v\n")).collect();
    assert!(Doc::parse(&wide).is_ok());
    let error = Doc::parse(&format!("{wide}k7: again\n")).err().unwrap();
    assert_eq!(
        error.position(),
        Some(Position {
            line: 101,
            column: 1
        })
    );
    let error = error.to_string();
    assert!(
        error.starts_with("duplicate mapping key \"k7\" at line 101"),
        "{error}"
    );
}

#[test]
fn tab_separators_parse_and_tabs_in_scalars_stay() {
    let src = "a:\tb\nc: \"x:\ty\"\nd: |\n  e:\tf\ng:\t[h]\n";
    let doc = Doc::parse(src).unwrap();
    let root = doc.roots[0];
    assert_eq!(doc.get_str(root, &["a"]), Some("b"));
    assert_eq!(doc.get_str(root, &["c"]), Some("x:\ty"));
    assert_eq!(doc.get_str(root, &["d"]), Some("e:\tf\n"));
    assert_eq!(doc.src, src);
}

#[test]
fn a_requested_stop_ends_the_parse() {
    let stop = Stop::default();
    stop.request();
    let block: String = (0..3000).map(|i| format!("k{i}: v\n")).collect();
    let flow = format!("[{}]", vec!["x"; 3000].join(", "));
    for src in [block, flow] {
        assert_eq!(
            Doc::parse_until(&src, &stop).err(),
            Some(ParseError::Stopped(Stopped))
        );
    }
}

#[test]
fn values_that_are_not_strings_are_replaced_not_skipped() {
    let src = "m:\n  k: {a: b}\n  l:\n    - x\n  s: &s old\n  t: *s\n";
    let out = edit(src, |doc, ed| {
        let m = doc.get(doc.roots[0], "m").unwrap();
        let entries =
            [("k", "v"), ("l", "w"), ("t", "new")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(ed.ensure_map(doc, m, &[], &entries, true), 3);
    });
    assert_eq!(out, "m:\n  k: v\n  l: w\n  s: &s old\n  t: new\n");
}

#[test]
fn quoting_rules() {
    for s in [
        "",
        "3",
        "true",
        "yes",
        "null",
        "1.5",
        "0x1f",
        "2024-01-01",
        "a: b",
        "-x ",
        "#c",
        "a #b",
        "ends:",
        "a\tb",
        "a\u{7f}b",
        "é\u{85}",
        "\u{feff}x",
        "x\u{feff}",
    ] {
        assert!(needs_quotes(s), "{s:?}");
    }
    for s in [
        "abc",
        "nginx:1.2",
        "a-b",
        "-x",
        "foo.bar/baz",
        "a:b",
        "a# b",
        "é ü",
        "Resource(apiVersion=apps/v1, kind=Deployment, name=a) does not have upstream origin.",
    ] {
        assert!(!needs_quotes(s), "{s}");
    }
}

#[test]
fn top_level_reads_keys_line_by_line_and_declines_what_only_a_parse_can_read() {
    let list = "# head\napiVersion: v1\nkind: ResourceList # the list\nitems:\n- a: 1\n  b: |\n    text\n\n# between\nfunctionConfig:\n  k: v\n# tail\n";
    let top = TopLevel::scan(list).unwrap();
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        ["apiVersion", "kind", "items", "functionConfig"]
    );
    assert_eq!(top.plain_scalar("kind"), Some("ResourceList"));
    assert_eq!(top.plain_scalar("items"), None);
    assert!(!top.has("results"));
    for declined in [
        "{kind: ResourceList}\n",
        "---\nkind: ResourceList\n",
        "%YAML 1.2\n---\nkind: A\n",
        "\"kind\": ResourceList\n",
        "kind: ResourceList\nkind: List\n",
        "kind: &k ResourceList\n",
        "items: [a,\nb]\n",
        "note: 'two\nlines'\n",
        "kind:\tResourceList\n",
        "kind: ResourceList\r\n",
        "  kind: ResourceList\n",
        "kind: ResourceList\nitems: x\n- a\n",
        "- a\n",
        "# only a comment\n",
        ": no key\n",
    ] {
        assert!(TopLevel::scan(declined).is_none(), "{declined:?}");
    }
    let many_keys: String = (0..100_000).map(|i| format!("k{i}: v\n")).collect();
    assert!(TopLevel::scan(&many_keys).is_none());
}

/// `src` with the edit [`TopLevel::mapping_edit`] gives.
fn with_mapping(src: &str, key: &str, mapping: &str) -> Option<String> {
    let (range, text) = TopLevel::scan(src)?.mapping_edit(key, mapping)?;
    let mut out = src.to_owned();
    out.replace_range(range, &text);
    Some(out)
}

#[test]
fn top_level_mapping_replaces_a_value_or_is_added_keeping_every_other_byte() {
    let config = "k: v\nn:\n  m: 1\n";
    let list = "kind: ResourceList\nfunctionConfig: # old\n  old: 1\n\n# kept\nresults: []\n";
    assert_eq!(
        with_mapping(list, "functionConfig", config).unwrap(),
        "kind: ResourceList\nfunctionConfig:\n  k: v\n  n:\n    m: 1\n\n# kept\nresults: []\n"
    );
    assert_eq!(
        with_mapping("kind: ResourceList", "functionConfig", config).unwrap(),
        "kind: ResourceList\nfunctionConfig:\n  k: v\n  n:\n    m: 1\n"
    );
    assert_eq!(
        with_mapping("kind: ResourceList\n", "functionConfig", config).unwrap(),
        "kind: ResourceList\nfunctionConfig:\n  k: v\n  n:\n    m: 1\n"
    );
    assert!(with_mapping(list, "functionConfig", "{k: v}").is_none());
}

#[test]
fn texts_longer_than_32_bit_offsets_hold_are_refused() {
    let too_long = MAX_TEXT_BYTES + 1;
    assert_eq!(
        limits::check_text_size(too_long).unwrap_err().to_string(),
        format!("the text is {too_long} bytes, more than the {MAX_TEXT_BYTES} a parse takes")
    );
    assert!(limits::check_text_size(MAX_TEXT_BYTES).is_ok());
}

#[test]
fn values_read_the_same_wherever_they_are_kept() {
    let src = "a: 'it''s'\nb: \"x\\ty\"\nc: 'q'\nd: |\n  z\ne: p # c\nf:\n---\n";
    for doc in [Doc::parse(src).unwrap(), Doc::parse_general(src).unwrap()] {
        let root = doc.roots[0];
        let values: Vec<_> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|key| doc.get_str(root, &[key]).unwrap())
            .collect();
        assert_eq!(values, ["it's", "x\ty", "q", "z\n", "p", ""]);
        assert_eq!(doc.str(doc.roots[1]), Some(""));
    }
}

#[test]
fn several_keys_are_found_as_one_at_a_time() {
    let src = "k: &k kind\nm: &m {a: 1}\n*k : x\n'b': 2\n\"c\": 3\nalias: *m\n";
    let doc = Doc::parse(src).unwrap();
    let root = doc.roots[0];
    let keys = ["kind", "b", "c", "missing", "m", "k"];
    let one_at_a_time = keys.map(|key| doc.get(root, key));
    assert_eq!(doc.get_each(root, keys), one_at_a_time);
    assert!(one_at_a_time[..3].iter().all(Option::is_some));
    let alias = doc.get(root, "alias").unwrap();
    assert_eq!(doc.get_each(alias, ["a", "b"]), [doc.get(alias, "a"), None]);
    let scalar = doc.get(root, "k").unwrap();
    assert_eq!(doc.get_each(scalar, ["kind"]), [None]);
}

#[test]
fn syntax_errors_name_their_kind_and_place() {
    let error = Doc::parse("a: [b\nc: d\n").err().unwrap();
    assert!(matches!(error, ParseError::Syntax(_)), "{error:?}");
    assert_eq!(error.position().map(|p| p.line), Some(2));
    let error = Doc::parse("a: &a [*a]\n").err().unwrap();
    assert_eq!(
        error,
        ParseError::RecursiveAlias {
            at: Position { line: 1, column: 8 }
        }
    );
    assert_eq!(
        error.to_string(),
        "the alias at line 1 column 8 refers to a node that contains it"
    );
}

/// `Doc::encode` of the value at `path` (keys, or item indexes) in `src`.
fn encoded(src: &str, path: &[&str]) -> String {
    let doc = Doc::parse(src).unwrap();
    let mut node = doc.roots[0];
    for step in path {
        node = match step.parse::<usize>() {
            Ok(index) => doc.items(node)[index],
            Err(_) => doc.get(node, step).unwrap(),
        };
    }
    doc.encode(node)
}

#[test]
fn nodes_are_encoded_as_kyaml_writes_them_alone() {
    // The nested forms are what the real kpt writes (confighub_cli's
    // mutation_values_are_written_as_kyaml_writes_them holds them to it); these are the
    // forms alone, as yaml.v3's emitter starts a document.
    let src = "\
a:
  folded: >
    one
    two

    three
  keep: |+
    x

  strip: |-
    x
  lead: |2
      spaced
    plain
  anchored: &m
    k: v # line
  flow: {a: , b: [1,
    2]}
  double: \"caf\\u00e9\\t\\U0001F600\"
  empty:
  &key anchoredKey: !!str &v 1
  tagged: &t |-
    x
  list:
  # head
  - x # line
  # foot

  - - z
    - y
  - # dash
    k: v
";
    assert_eq!(
        encoded(src, &["a", "folded"]),
        ">\n  one two\n\n  three\n\n"
    );
    assert_eq!(encoded(src, &["a", "keep"]), "|+\n  x\n\n");
    assert_eq!(encoded(src, &["a", "strip"]), "|-\n  x\n");
    assert_eq!(encoded(src, &["a", "lead"]), "|2\n    spaced\n  plain\n");
    assert_eq!(encoded(src, &["a", "anchored"]), "&m\nk: v # line\n");
    assert_eq!(encoded(src, &["a", "flow"]), "{a: '', b: [1, 2]}\n");
    assert_eq!(encoded(src, &["a", "double"]), "\"café\\t\\U0001F600\"\n");
    // An empty plain scalar is written as nothing: the document is its line break.
    assert_eq!(encoded(src, &["a", "empty"]), "\n");
    assert_eq!(encoded(src, &["a", "anchoredKey"]), "&v !!str 1\n");
    assert_eq!(encoded(src, &["a", "tagged"]), "&t |-\n  x\n");
    assert!(encoded(src, &["a"]).contains("\n&key anchoredKey: &v !!str 1\n"));
    // An item carries its head, line and foot comments.
    assert_eq!(
        encoded(src, &["a", "list", "0"]),
        "# head\nx # line\n# foot\n"
    );
    assert_eq!(
        encoded(src, &["a", "list"]),
        "# head\n- x # line\n# foot\n\n- - z\n  - y\n- # dash\n  k: v\n"
    );
    assert_eq!(encoded(src, &["a", "list", "1"]), "- z\n- y\n");
    // The comment on a dash's own line heads the first key below it.
    assert_eq!(encoded(src, &["a", "list", "2"]), "# dash\nk: v\n");
}

#[test]
fn a_comment_after_an_anchor_is_carried_as_yaml_v3_carries_it() {
    // Past values with comments of their own, out of its map, to the next key that has none;
    // on a key whose value has an anchor or tag, the emitter writes those on the next line at
    // the first column. Each expected text is what the real kpt (`kpt fn source`) writes for
    // the same text nested under a key.
    let src = "\
a: &x # c
  k: v # own
  j: &y # own2
    q: 1
  i: 2
b:
  m: &z # d
    k: v # own
  n: 1
c: !!seq # e
- x # own
";
    assert_eq!(
        encoded(src, &["a"]),
        "&x\nk: v # own\nj: # c\n&y\n  q: 1 # own2\ni: 2\n"
    );
    assert_eq!(encoded(src, &["b"]), "m: &z\n  k: v # own\nn: 1 # d\n");
    // A sequence's first item takes it, its own comment going below.
    assert_eq!(encoded(src, &["c"]), "!!seq\n- x # e\n# own\n");
}

#[test]
fn comments_inside_a_flow_collection_break_it_as_yaml_v3_does() {
    // What the real kpt writes for this document (`kpt fn source | kpt fn sink`): a line
    // comment ends its entry's line after a comma, the next line starts one step in from the
    // collection around it, and a sequence's closing bracket on a line of its own goes back
    // to that step.
    let src = "{data: {a: 1, # one\n    b: 2}, list: [1, 2 # two\n  ]}\n";
    let doc = Doc::parse(src).unwrap();
    assert_eq!(
        doc.encode(doc.roots[0]),
        "{data: {a: 1, # one\n    b: 2}, list: [1, 2, # two\n  ]}\n"
    );
}

#[test]
fn flow_collections_with_blanks_inside_their_brackets_are_flow() {
    let src = "a: [ x, y ]\nb: { c: d }\n";
    let doc = Doc::parse(src).unwrap();
    for (key, text, encoded) in [("a", "[ x, y ]", "[x, y]\n"), ("b", "{ c: d }", "{c: d}\n")] {
        let node = doc.get(doc.roots[0], key).unwrap();
        assert!(doc.node(node).flow(), "{key}");
        assert_eq!(&src[doc.node(node).start()..doc.node(node).end()], text);
        assert_eq!(doc.encode(node), encoded);
    }
}

#[test]
fn flow_collections_with_a_comment_after_their_bracket_are_flow() {
    // Once taken for block collections: an entry added to one was written below it, outside
    // its braces, and the document no longer parsed.
    let src = "m: { # c\n  k: v}\ns: &a [ # c\n  x, y]\nt: !!seq [\n  # head\n  x]\n";
    let out = edit(src, |doc, ed| {
        let m = doc.get(doc.roots[0], "m").unwrap();
        ed.ensure_map(doc, m, &[], &[("nk".into(), "3".into())], true);
    });
    let doc = Doc::parse(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let m = doc.get(doc.roots[0], "m").unwrap();
    assert!(doc.node(m).flow(), "{out}");
    assert_eq!(doc.get_str(m, &["k"]), Some("v"), "{out}");
    assert_eq!(doc.get_str(m, &["nk"]), Some("3"), "{out}");
    for key in ["s", "t"] {
        let node = doc.get(doc.roots[0], key).unwrap();
        assert!(doc.node(node).flow(), "{key}");
        assert!(doc.src[doc.node(node).start()..].starts_with('['), "{key}");
    }
}

#[test]
fn entries_added_into_flow_mappings_with_blanks_stay_valid() {
    let src = "m: { k: v }\n";
    let out = edit(src, |doc, ed| {
        let m = doc.get(doc.roots[0], "m").unwrap();
        ed.ensure_map(doc, m, &[], &[("nk".into(), "3".into())], true);
    });
    let doc = Doc::parse(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let m = doc.get(doc.roots[0], "m").unwrap();
    assert_eq!(doc.get_str(m, &["k"]), Some("v"), "{out}");
    assert_eq!(doc.get_str(m, &["nk"]), Some("3"), "{out}");
}

#[test]
fn documents_keep_their_head_and_foot_comments_apart() {
    let src =
        "# about the document\n\n# about a\n\n# still a\na: 1\nb: 2\n# b's foot\n\n# the end\n";
    let doc = Doc::parse(src).unwrap();
    assert_eq!(doc.encode(doc.roots[0]), src);
    let set_apart = "# about the document\n\na: 1\n";
    let doc = Doc::parse(set_apart).unwrap();
    assert_eq!(doc.encode(doc.roots[0]), set_apart);
}

#[test]
fn a_block_scalar_replaced_leaves_the_next_line_as_it_was() {
    // The parser's span of a block scalar runs on over the next line's indentation: replacing
    // it once moved the next key to the first column.
    let src = "a:\n  r: |\n    3\n\n  s: 1\n  t: |2 # kept\n  u: 2\n  l:\n  - >-\n    x\n  - y\n";
    let out = edit(src, |doc, ed| {
        let a = doc.get(doc.roots[0], "a").unwrap();
        ed.set_scalar(doc, doc.get(a, "r").unwrap(), "7", true);
        ed.replace_node(doc, doc.get(a, "t").unwrap(), &New::Plain("8".into()));
        let l = doc.get(a, "l").unwrap();
        ed.replace_node(doc, doc.items(l)[0], &New::Plain("9".into()));
    });
    assert_eq!(
        out,
        "a:\n  r: \"7\"\n\n  s: 1\n  t: 8 # kept\n  u: 2\n  l:\n  - 9\n  - y\n"
    );
}
