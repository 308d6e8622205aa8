//! The load()-able libraries of qri-io/starlib v0.5.0 that krm-runner implements, each against
//! what starlib's own cases and Go's readers give, and against hostile inputs.

use krm_plugin_api::EvalResponse;

use crate::run_function;

/// A StarlarkRun named `prog` running `source` over one ConfigMap.
fn program(source: &str) -> String {
    let source: String = source.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: cfg\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: prog\n  source: |\n{source}"
    )
}

/// What the program printed.
fn printed(source: &str) -> String {
    match run_function("starlark", program(source).as_bytes()) {
        Ok(EvalResponse { log, .. }) => String::from_utf8(log).unwrap(),
        Err(e) => panic!(
            "{source}: {e:?}\n{}",
            String::from_utf8_lossy(&e.resource_list)
        ),
    }
}

/// The message of the error result of a program that fails.
fn failure(source: &str) -> String {
    let error = run_function("starlark", program(source).as_bytes()).expect_err(source);
    let output: yaml_serde::Value = yaml_serde::from_slice(&error.resource_list).unwrap();
    let message = &output["results"][0]["message"];
    message.as_str().expect("an error result").to_owned()
}

#[test]
fn csv_reads_and_writes_as_starlib() {
    let log = printed(
        r##"load('encoding/csv.star', 'csv')
print(csv.read_all("a,b,c\n1,2,3\n4,5,6\n7,8,9\n"))
print(csv.write_all([[1,2,3],[4,5,6],['a','b','c']]) == "1,2,3\n4,5,6\na,b,c\n")
print(csv.read_all('x;"y;z"\r\n# note\n\n"q ""w"" e";r\n', comma=";", comment="#"))
print(csv.read_all("h1,h2\n1,2\n", skip=1))
print(csv.read_all("a,b\nc\n", fields_per_record=-1))
print(csv.read_all("a,  b\n  \"c,d\",e\n", trim_leading_space=True))
print(csv.read_all('a"b,"c"d"\n', lazy_quotes=True))
print(repr(csv.write_all([["x,y", 'say "hi"', 1.5, 1e21, True, None, [1, "a"], {"k": 2, "a": 1}]], comma=",")))
print(repr(csv.write_all((("a", "b"),), comma="\t")))
"##,
    );
    assert_eq!(
        log,
        r#"[["a", "b", "c"], ["1", "2", "3"], ["4", "5", "6"], ["7", "8", "9"]]
True
[["x", "y;z"], ["q \"w\" e", "r"]]
[["1", "2"]]
[["a", "b"], ["c"]]
[["a", "b"], ["c,d", "e"]]
[["a\"b", "cd\""]]
"\"x,y\",\"say \"\"hi\"\"\",1.5,1e+21,true,<nil>,[1 a],map[a:1 k:2]\n"
"a\tb\n"
"#
    );
}

#[test]
fn csv_errors_give_gos_meaning_the_function_and_the_line() {
    for (call, expected) in [
        (
            r#"csv.read_all('a,b"c\n')"#,
            "csv.read_all: parse error on line 1, column 4: bare \" in non-quoted field",
        ),
        (
            r#"csv.read_all('"a"b,c\n')"#,
            "csv.read_all: parse error on line 1, column 4: extraneous or missing \" in quoted-field",
        ),
        (
            r#"csv.read_all('x\n"a,\nb')"#,
            "csv.read_all: record on line 2; parse error on line 3, column 2: extraneous or missing",
        ),
        (
            r#"csv.read_all('a,b\nc\n')"#,
            "csv.read_all: record on line 2: wrong number of fields",
        ),
        (
            r#"csv.read_all('a,b\n', fields_per_record=3)"#,
            "csv.read_all: record on line 1: wrong number of fields",
        ),
        (
            r#"csv.read_all('a', comma=';;')"#,
            "csv.read_all: expected comma param to be a single-character string",
        ),
        (
            r#"csv.read_all('a', comment='##')"#,
            "csv.read_all: expected comment param to be a single-character string",
        ),
        (
            r#"csv.read_all('a', comma='#', comment='#')"#,
            "csv.read_all: invalid field or comment delimiter",
        ),
        (
            r#"csv.read_all(3)"#,
            "csv.read_all: source must be a string, not int",
        ),
        (
            r#"csv.write_all("abc")"#,
            "csv.write_all: expected value to be an array type",
        ),
        (
            r#"csv.write_all([[1], 2])"#,
            "csv.write_all: row 1 is not an array type",
        ),
        (
            r#"csv.write_all([[set([1])]])"#,
            "csv.write_all: sets aren't yet supported",
        ),
    ] {
        let message = failure(&format!(
            "load('encoding/csv.star', 'csv')\nx = 1\ny = {call}\n"
        ));
        assert!(message.contains(expected), "{call}: {message}");
        assert!(
            message.contains("prog:3:"),
            "{call} names the line: {message}"
        );
    }
    // Errors in the records `skip` drops are ignored, as starlib ignores them.
    assert_eq!(
        printed("load('encoding/csv.star', 'csv')\nprint(csv.read_all('a\"b\\n1\\n', skip=1))\n"),
        "[[\"1\"]]\n"
    );
}

/// Reading measures the lists and strings it would make and refuses them past what is left of
/// the heap budget; writing stops once its text passes it, however shared the rows are.
#[test]
fn csv_results_count_against_the_heap_budget() {
    for (source, expected) in [
        (
            // 2 MiB of commas: 2 million empty fields, each a string on the heap.
            "s = ',' * 2097152\nrows = [s] * 60\nt = '\\n'.join(rows)\nr = csv.read_all(t)\n",
            "`csv.read_all` would make more than",
        ),
        (
            "row = ['x' * 1048576] * 16\nrows = [row] * 32\nt = csv.write_all(rows)\n",
            "`csv.write_all` would make",
        ),
        (
            "l = ['x' * 1048576]\nfor i in range(12):\n  l = [l, l]\nt = csv.write_all([[l]])\n",
            "`csv.write_all` would make more than",
        ),
    ] {
        let message = failure(&format!("load('encoding/csv.star', 'csv')\n{source}"));
        assert!(message.contains(expected), "{source}: {message}");
        assert!(message.contains("heap budget of 256 MiB"), "{message}");
        assert!(message.contains("prog:"), "names the line: {message}");
    }
}

/// A zip archive of `entries` (name, contents, deflated?), base64-encoded for a program.
fn zip_base64(entries: &[(&str, &[u8], bool)]) -> String {
    use base64::Engine;
    use std::io::Write;
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for &(name, data, deflated) in entries {
        let method = if deflated {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        if name.ends_with('/') {
            writer.add_directory(name, options).unwrap();
        } else {
            writer.start_file(name, options).unwrap();
            writer.write_all(data).unwrap();
        }
    }
    let bytes = writer.finish().unwrap().into_inner();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn zipfile_lists_and_reads_entries_as_starlib() {
    let archive = zip_base64(&[
        ("testdata/", b"", false),
        ("testdata/world/", b"", false),
        ("testdata/world/world.txt", b"world\n", true),
        ("testdata/hello.txt", b"hello\n", false),
        ("bin/blob", &[0xff, 0x00, 0xfe], true),
    ]);
    let log = printed(&format!(
        r#"load('zipfile.star', 'ZipFile')
load('encoding/base64.star', 'base64')
zr = ZipFile(base64.decode("{archive}"))
print(zr.namelist())
print(repr(zr.open("testdata/hello.txt").read()), repr(zr.open("testdata/world/world.txt").read()))
blob = zr.open("bin/blob").read()
print(type(blob), len(blob), base64.encode(blob), blob)
"#
    ));
    assert_eq!(
        log,
        "[\"testdata/\", \"testdata/world/\", \"testdata/world/world.txt\", \"testdata/hello.txt\", \"bin/blob\"]\n\"hello\\n\" \"world\\n\"\nbytes 3 /wD+ <bytes: 3 bytes>\n"
    );
}

#[test]
fn hostile_archives_end_with_an_error_naming_the_entry() {
    // 300 MiB of zeros deflate to a few hundred KiB: refused by its declared size, before
    // anything is inflated.
    let zeros = vec![0u8; 300 << 20];
    let bomb = zip_base64(&[("zeros.bin", &zeros, true)]);
    drop(zeros);
    // An entry whose contents are longer than it declares (its sizes patched down).
    let liar = {
        use base64::Engine;
        let engine = base64::engine::general_purpose::STANDARD;
        let mut bytes = engine
            .decode(zip_base64(&[("liar.txt", &[b'a'; 4096], true)]))
            .unwrap();
        let size = 4096u32.to_le_bytes();
        let positions: Vec<usize> = bytes
            .windows(4)
            .enumerate()
            .filter(|(_, w)| *w == size)
            .map(|(i, _)| i)
            .collect();
        assert!(!positions.is_empty());
        for i in positions {
            bytes[i..i + 4].copy_from_slice(&16u32.to_le_bytes());
        }
        engine.encode(bytes)
    };
    for (source, expected) in [
        (
            format!(
                "z = ZipFile(base64.decode(\"{bomb}\"))\nx = 1\ny = z.open(\"zeros.bin\").read()\n"
            ),
            "prog:5:5: `read` of \"zeros.bin\"",
        ),
        (
            format!(
                "z = ZipFile(base64.decode(\"{liar}\"))\nx = 1\ny = z.open(\"liar.txt\").read()\n"
            ),
            "prog:5:5: read of \"liar.txt\":",
        ),
        (
            "x = 1\ny = 2\nz = ZipFile(\"x\" * 24000000)\n".to_owned(),
            "prog:5:5: `ZipFile` of a 24000000-byte archive (which could index 521739 entries) would make",
        ),
        (
            "x = 1\ny = 2\nz = ZipFile(\"not a zip\")\n".to_owned(),
            "prog:5:5: ZipFile: not a zip archive",
        ),
        (
            format!(
                "z = ZipFile(base64.decode(\"{liar}\"))\nx = 1\ny = z.open(\"../../etc/passwd\")\n"
            ),
            "prog:5:5: open: \"../../etc/passwd\" not found in the archive",
        ),
        (
            "x = 1\ny = 2\nz = ZipFile(3)\n".to_owned(),
            "ZipFile: file must be a string or bytes, not int",
        ),
    ] {
        let message = failure(&format!(
            "load('zipfile.star', 'ZipFile')\nload('encoding/base64.star', 'base64')\n{source}"
        ));
        assert!(message.contains(expected), "{expected}: {message}");
    }
}

#[test]
fn while_loops_fail_naming_the_line_and_why() {
    let message = failure("x = 0\nif x == 0:\n  while x < 3:\n    x += 1\n");
    assert!(
        message.contains(
            "prog:3:3: `while` loops are not supported: krm-runner's Starlark interpreter"
        ),
        "{message}"
    );
}

const PAGE: &str = r##"<!DOCTYPE html>
<html>
<head>
  <title>example page</title>
</head>
<body id="A" class="le_body">
  <header id="B">Header Tag</header>
  <section id="C">
    <div id="D" class="le_div">
      <h1 id="E" data-name="foo">Heading One</h1>
      <p id="F" class="paragraph big">Paragraph</p>
    </div>
  </section>
  <footer id="G">
    <a id="H" href="http://foo.com">link</a>
  </footer>
</body>
</html>
"##;

/// `source` with the global `page` holding [`PAGE`].
fn with_page(source: &str) -> String {
    format!("page = {}\n{source}", serde_json::to_string(PAGE).unwrap())
}

#[test]
fn html_selects_as_goquery_does_for_starlib() {
    let log = printed(&with_page(
        r##"load('html.star', 'html')
doc = html(page)
print(repr(doc.find("#E").text()), repr(doc.find("body header").text()), doc.find("#E").attr("data-name"))
print(doc.find("footer").children().attr("href"), doc.find("#D").children_filtered("#E").attr("data-name"))
print(doc.find("#D").children().filter("h1").attr("data-name"), doc.has("#B").find("header").text())
print(doc.find("#A").children().first().text(), repr(doc.find("#A").children().last().text()))
print(doc.find("#A").children().eq(0).text(), doc.find("#A").children().eq(-1).attr("id"), doc.find("#A").children().len())
p = doc.find("p")
print(p.parent().attr("class"), p.parents_until("body").attr("class"), p.parents_until("body").len())
print(p.siblings().text(), p.get(), p.get(0), p.get(5), p.attr("missing"))
print(doc.find("[[invalid").len(), doc.find("li").len(), doc.find("#E").eq(3).len())
print(doc.find("#E").contents().get(), doc.children().text() == doc.contents().text())
"##,
    ));
    assert_eq!(
        log,
        "\"Heading One\" \"Header Tag\" foo\nhttp://foo.com foo\nfoo Header Tag\nHeader Tag \"\\n    link\\n  \"\nHeader Tag G 3\nle_div le_div 2\nHeading One (\"p\",) p None None\n0 0 0\n(\"Heading One\",) True\n"
    );
}

#[test]
fn bsoup_finds_as_starlibs_soup() {
    let log = printed(&with_page(
        r##"load('bsoup.star', 'bsoup')
doc = bsoup.parseHtml(page)
print(doc.find("h1"))
print(doc.find("", {"class": "big"}).get_text(), doc.find(id="D").child("h1").get_text(), doc.find("p", {"class": "paragraph"}, id="F").attrs())
print([n.get_text() for n in doc.find_all("a")], len(doc.find_all()), len(doc.find_all("div", id="nope")))
print(doc.find(id="C").next_sibling().next_sibling().attrs(), doc.find(id="C").prev_sibling().prev_sibling())
print(doc.find("b"), doc.find("h1").parent().attrs()["id"], doc.parent().parent())
print([str(n) for n in doc.find("header").contents()], doc.find("title").get_text(), repr(doc.find("body").get_text()))
print(doc.find("h1") == doc.find(id="E"), doc.find("h1") == doc.find("p"))
"##,
    ));
    assert_eq!(
        log,
        "<h1 id=\"E\" data-name=\"foo\">Heading One</h1>\nParagraph Heading One {\"id\": \"F\", \"class\": \"paragraph big\"}\n[\"link\"] 10 0\n{\"id\": \"G\"} <header id=\"B\">Header Tag</header>\nNone D None\n[\"Header Tag\"] example page \"\"\nTrue False\n"
    );
}

#[test]
fn html_errors_name_the_function_and_documents_are_bounded() {
    for (source, expected) in [
        (
            "load('bsoup.star', 'bsoup')\nx = 1\nd = bsoup.parseHtml('<p>x</p>').find('p', 'div')\n",
            "prog:3:5: find: only one tagName parameter is allowed, found div",
        ),
        (
            "load('bsoup.star', 'bsoup')\nx = 1\nd = bsoup.parseHtml('<p>x</p>').find(3)\n",
            "prog:3:5: find: invalid parameter 3",
        ),
        (
            "load('bsoup.star', 'bsoup')\nx = 1\nd = bsoup.parseHtml('<p>x</p>').find(id=3)\n",
            "prog:3:5: find: expected a string, not int: 3",
        ),
        (
            "load('html.star', 'html')\nx = 1\nd = html('<p>x</p>').find('p:has(a:has(b))')\n",
            "prog:3:5: find: selector \"p:has(a:has(b))\" nests `:has()`",
        ),
        (
            "load('html.star', 'html')\nx = 1\nd = html('<div>' * 100000)\n",
            "prog:3:5: html: the document has 100000 tags, more than the 10000 krm-runner parses",
        ),
        (
            "load('html.star', 'html')\nx = 1\nd = html('<div>' * 1000)\n",
            "prog:3:5: html: the document nests its nodes 1003 deep, more than the 512 levels",
        ),
        (
            "load('bsoup.star', 'bsoup')\nx = 1\nd = bsoup.parseHtml('<a>' * 2000000)\n",
            "prog:3:5: `bsoup.parseHtml` of a 6000000-byte document would make 384000000 bytes, more than",
        ),
    ] {
        let message = failure(source);
        assert!(message.contains(expected), "{expected}: {message}");
    }
    // A document as deep as allowed still answers, and the text of a large one is measured.
    let log = printed(
        "load('html.star', 'html')\nd = html('<div>' * 500 + 'x')\nprint(d.find('div div').len(), d.find('span div').len(), d.text())\n",
    );
    assert_eq!(log, "499 0 x\n");
}

/// starlib's geo test.star polygon with a hole, and the same outline without one.
const GEO_SHAPES: &str = r#"load('geo.star', 'geo')
outline = [[-93.515625, 54.16243396806779], [-99.49218749999999, 42.5530802889558],
  [-72.0703125, 32.24997445586331], [-72.0703125, 43.83452678223682],
  [-72.0703125, 54.36775852406841], [-80.85937499999999, 57.326521225217064],
  [-93.515625, 54.16243396806779]]
hole = [[-87.1875, 49.61070993807422], [-87.890625, 44.59046718130883],
  [-81.2109375, 43.83452678223682], [-80.5078125, 48.22467264956519],
  [-87.1875, 49.61070993807422]]
p = geo.Polygon([outline, hole])
poly1 = geo.Polygon([geo.Line(outline)])
"#;

#[test]
fn geo_measures_and_joins_as_starlib() {
    let log = printed(&format!(
        r#"{GEO_SHAPES}
p1 = geo.Point(-44.34, 33)
print(p1.x, p1.lat, p1.y, p1.lng)
print(p1.distanceGeodesic(geo.Point(-44, 33)) == 31742.52939277697)
print(geo.Point(1, 1).distance(p2 = geo.Point(2, 1)), geo.Point(x = 3, y = 4).distance(geo.Point(0, 0)))
line = geo.Line([[1, 2], geo.Point(2, 2)])
print(line.length(), line.lengthGeodesic() == 111251.67796723428)
print(line, len(line), line[-1], [str(pt) for pt in line], bool(geo.Line([])))
print(p1, bool(geo.Point(0, 1)), type(p1), type(line), type(p), p1 == geo.Point(-44.34, 33.0))
print({{p1: "found"}}[geo.Point(-44.34, 33)], line == geo.Line([geo.Point(1, 2), [2, 2]]))
print(geo.within(geo.Point(-65.390625, 48.45835188280866), poly1), geo.within(geo.Point(-93.5, 53.1), poly1))
in_hole = geo.Point(-84, 46.5)
print(geo.within(in_hole, p), geo.within(in_hole, poly1), geo.within(geo.Point(-72.0703125, 40), p))
both = geo.MultiPolygon([p, poly1])
print(both, len(both), both[0], len(both[0][1]), type(both[1][0]), geo.within(in_hole, both))
print(geo.within(geo.Line([[-93.5, 53.1], [0, 0]]), poly1), geo.within(geo.Line([[0, 0], [-93.5, 53.1]]), poly1))
geoms, properties = geo.parseGeoJSON('''{{"type": "FeatureCollection", "features": [
  {{"type": "Feature", "properties": {{"ufo_sightings": 20, "population": 40, "name": "a", "tags": [1, null, true]}},
   "geometry": {{"type": "Point", "coordinates": [-103.0078125, 38.272688535980976]}}}},
  {{"type": "Feature", "properties": null,
   "geometry": {{"type": "LineString", "coordinates": [[1, 2], [2, 2, 5]]}}}},
  {{"type": "Feature", "properties": {{"ufo_sightings": 100}},
   "geometry": {{"type": "Polygon", "coordinates": [[[0, 0], [0, 4], [4, 4], [0, 0]]]}}}}]}}''')
print(geoms[0].lat, geoms[0].lng, geoms[1], geoms[1].lengthGeodesic() == 111251.67796723428)
print(geoms[2], geo.within(geo.Point(1, 3), geoms[2]), properties[2]["ufo_sightings"] == 100)
print(sorted(properties[0].items()), properties[1])
"#
    ));
    assert_eq!(
        log,
        r#"-44.34 -44.34 33.0 33.0
True
1.0 5.0
1.0 True
[(1.000000,2.000000) (2.000000,2.000000) ] 2 (2.000000,2.000000) ["(1.000000,2.000000)", "(2.000000,2.000000)"] False
(-44.340000,33.000000) False Point Line Polygon True
found True
False True
False True True
multi polygon 2 polygons 2 polygon 2 rings 5 Line True
True False
-103.0078125 38.272688535980976 [(1.000000,2.000000) (2.000000,2.000000) ] True
polygon 1 rings True True
[("name", "a"), ("population", 40.0), ("tags", [1.0, None, True]), ("ufo_sightings", 20.0)] {}
"#
    );
}

#[test]
fn geo_errors_name_the_function_and_the_line() {
    for (call, expected) in [
        (
            "geo.Point('a', 1)",
            "geo.Point: invalid type 'string' expected int or float",
        ),
        (
            "geo.Line(([1, 2],))",
            "geo.Line: for parameter points: got tuple, want list",
        ),
        (
            "geo.Line([[1, 2, 3]])",
            "geo.Line: wrong number elements for point. expected 2, got: 3",
        ),
        (
            "geo.Line([1])",
            "geo.Line: invalid type 'int' to create line",
        ),
        (
            "geo.Polygon([[[0, 0], [1, 1]]])",
            "geo.Polygon: line 0 is not closed",
        ),
        (
            "geo.Polygon([outline, geo.Line([])])",
            "geo.Polygon: line 1 is not closed",
        ),
        (
            "geo.Polygon(['x'])",
            "geo.Polygon: invalid type for creating polygon: string",
        ),
        (
            "geo.MultiPolygon([poly1, outline])",
            "geo.MultiPolygon: invalid type for creating MultiPolygon: list",
        ),
        (
            "geo.within(geo.Point(1, 1), geo.Line(outline))",
            "geo.within: within b value must be either a Polygon or Multipolygon. got: Line",
        ),
        (
            "geo.within(poly1, p)",
            "geo.within: checking polygons-within-polygons is not yet supported",
        ),
        ("geo.within(1, p)", "geo.within: unrecognized type: int"),
        (
            "geo.within(geo.Line([]), p)",
            "geo.within: the line has no points",
        ),
        (
            "geo.intersects(p, poly1)",
            "geo.intersects: not finished: intersects",
        ),
        (
            "geo.Point(1, 1).buffer(2)",
            "geo.buffer: not yet implemented: buffer",
        ),
        (
            "geo.Point(1, 1).KNN(2)",
            "geo.KNN: not yet implemented: knn",
        ),
        (
            "geo.Point(1, 1).distance([2, 1])",
            "geo.distance: for parameter p2: got list, want Point",
        ),
        (
            "geo.Line(outline)[7]",
            "geo.Line: index 7 out of range: length is 7",
        ),
        (
            "geo.parseGeoJSON(3)",
            "geo.parseGeoJSON: invalid argument type, expected string",
        ),
        (
            "geo.parseGeoJSON('{\"type\": \"Point\", \"coordinates\": [1, 2]}')",
            "geo.parseGeoJSON: not a GeoJSON FeatureCollection",
        ),
        (
            r#"geo.parseGeoJSON('{"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {}, "geometry": {"type": "MultiPoint", "coordinates": [[1, 2]]}}]}')"#,
            "geo.parseGeoJSON: unrecognized geoJSON type: MultiPoint",
        ),
        (
            r#"geo.parseGeoJSON('{"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {}, "geometry": null}]}')"#,
            "geo.parseGeoJSON: feature 0 has no geometry",
        ),
    ] {
        let message = failure(&format!("{GEO_SHAPES}x = {call}\n"));
        assert!(message.contains(expected), "{call}: {message}");
        assert!(message.contains("prog:11:"), "names the line: {message}");
    }
}

#[test]
fn geo_coordinates_count_against_the_heap_budget() {
    for (source, expected) in [
        (
            // 96 MiB of list items, 192 MiB of coordinates.
            "points = [[1, 2]] * 12000000\nline = geo.Line(points)\n",
            "`geo.Line` of 12000000 points would make 192000040 bytes, more than",
        ),
        (
            "ring = [[0, 0], [0, 1], [0, 0]] * 4000000\nshape = geo.Polygon([ring])\n",
            "`geo.Polygon` of 12000000 points would make 192000040 bytes, more than",
        ),
        (
            // 9.6 MB of coordinates whose text would take 374 MB.
            "line = geo.Line([[1e300, -1e300]] * 600000)\nprint(line)\n",
            "`print()` of these values would make more than",
        ),
        (
            "text = ' ' * 5000000 + '{}'\nshapes = geo.parseGeoJSON(text)\n",
            "`geo.parseGeoJSON` of 5000002 bytes would make 320000128 bytes, more than",
        ),
    ] {
        let message = failure(&format!("load('geo.star', 'geo')\n{source}"));
        assert!(message.contains(expected), "{source}: {message}");
        assert!(message.contains("heap budget of 256 MiB"), "{message}");
        assert!(message.contains("prog:"), "names the line: {message}");
    }
}
