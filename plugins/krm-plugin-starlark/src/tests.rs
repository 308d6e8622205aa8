use krm_plugin_api::{EvalError, EvalResponse};

use crate::run_function;

const ITEMS: &str = "\
- # the web app
  apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web # keep me
    labels:
      tier: 'front'
  spec:
    replicas: 1
    template:
      spec:
        containers:
        - name: web
          image: nginx:1.25 # pinned
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cfg
  data:
    key: \"value\"
";

fn input(function_config: &str) -> String {
    format!(
        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{ITEMS}functionConfig:\n{}",
        indent(function_config)
    )
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn starlark_run(source: &str) -> String {
    input(&format!(
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: prog\nsource: |\n{}",
        indent(source)
    ))
}

fn ok(input: &str) -> (String, String) {
    match run_function("starlark", input.as_bytes()) {
        Ok(EvalResponse {
            resource_list, log, ..
        }) => (
            String::from_utf8(resource_list).unwrap(),
            String::from_utf8(log).unwrap(),
        ),
        Err(e) => panic!("{e:?}\n{}", String::from_utf8_lossy(&e.resource_list)),
    }
}

fn failed(input: &str) -> (String, EvalError) {
    let error = run_function("starlark", input.as_bytes()).expect_err("the call fails");
    (
        String::from_utf8(error.resource_list.clone()).unwrap(),
        error,
    )
}

/// The ResourceList as it came in, up to `functionConfig` (the items part).
fn items_of(output: &str) -> &str {
    &output[..output.find("functionConfig:").unwrap()]
}

#[test]
fn an_untouching_program_returns_the_input_byte_for_byte() {
    let input = starlark_run("for r in ctx.resource_list[\"items\"]:\n  x = r[\"kind\"]\n");
    assert_eq!(ok(&input).0, input);
}

#[test]
fn edits_change_only_the_changed_fields_keeping_comments() {
    let input = starlark_run(
        "for r in ctx.resource_list[\"items\"]:\n  r[\"metadata\"][\"namespace\"] = \"prod\"\n  if r[\"kind\"] == \"Deployment\":\n    r[\"spec\"][\"replicas\"] = 3\n",
    );
    let (output, _) = ok(&input);
    let expected = input
        .replace(
            "      tier: 'front'\n",
            "      tier: 'front'\n    namespace: prod\n",
        )
        .replace("    replicas: 1\n", "    replicas: 3\n")
        .replace("    name: cfg\n", "    name: cfg\n    namespace: prod\n");
    assert_eq!(output, expected);
}

#[test]
fn new_items_are_appended_with_sorted_keys_and_deleted_items_go() {
    let input = starlark_run(
        "items = ctx.resource_list[\"items\"]\nitems.append({\"kind\": \"Namespace\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"prod\"}})\nctx.resource_list[\"items\"] = [r for r in items if r[\"kind\"] != \"ConfigMap\"]\n",
    );
    let (output, _) = ok(&input);
    let web = &ITEMS[..ITEMS.find("- apiVersion: v1").unwrap()];
    assert_eq!(
        items_of(&output),
        format!(
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{web}- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: prod\n"
        )
    );
}

#[test]
fn entries_added_to_an_item_stay_in_it_when_new_items_follow_it() {
    // Both kept items end where a new item starts, so their new entries and the new items are
    // written at one spot.
    let input = starlark_run(
        "items = ctx.resource_list[\"items\"]\nitems.insert(1, {\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"mid\"}})\nitems.append({\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"last\"}})\nfor r in items:\n  r[\"note\"] = \"x\"\n",
    );
    let (output, _) = ok(&input);
    let new = |name: &str| {
        format!("- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: {name}\n  note: x\n")
    };
    let expected = ITEMS
        .replace(
            "# pinned\n",
            &format!("# pinned\n  note: x\n{}", new("mid")),
        )
        .replace(
            "\"value\"\n",
            &format!("\"value\"\n  note: x\n{}", new("last")),
        );
    assert_eq!(
        items_of(&output),
        format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{expected}")
    );
}

#[test]
fn list_growth_and_removal_inside_an_item_keep_the_other_entries() {
    let input = starlark_run(
        "d = ctx.resource_list[\"items\"][0]\nd[\"spec\"][\"template\"][\"spec\"][\"containers\"].append({\"name\": \"log\", \"image\": \"fluentd\"})\nd[\"metadata\"].pop(\"labels\")\n",
    );
    let (output, _) = ok(&input);
    let expected = input
        .replace("    labels:\n      tier: 'front'\n", "")
        .replace(
            "          image: nginx:1.25 # pinned\n",
            "          image: nginx:1.25 # pinned\n        - image: fluentd\n          name: log\n",
        );
    assert_eq!(output, expected);
}

#[test]
fn params_and_configmap_data_reach_the_program() {
    let input = input(
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: p\nparams:\n  ns: team-a\n  replicas: 4\nsource: |\n  p = ctx.resource_list[\"functionConfig\"][\"params\"]\n  for r in ctx.resource_list[\"items\"]:\n    r[\"metadata\"][\"namespace\"] = p[\"ns\"]\n",
    );
    assert!(ok(&input).0.contains("    namespace: team-a\n"));
    let input = self::input(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  replicas: \"5\"\n  source: |\n    for r in ctx.resource_list[\"items\"]:\n      if r[\"kind\"] == \"Deployment\":\n        r[\"spec\"][\"replicas\"] = int(ctx.resource_list[\"functionConfig\"][\"data\"][\"replicas\"])\n",
    );
    assert!(ok(&input).0.contains("    replicas: 5\n"));
}

#[test]
fn results_the_program_appends_are_written_and_errors_fail() {
    let input = starlark_run(
        "ctx.resource_list[\"results\"].append({\"message\": \"checked\", \"severity\": \"info\"})\n",
    );
    let (output, _) = ok(&input);
    assert!(
        output.ends_with("results:\n- message: checked\n  severity: info\n"),
        "{output}"
    );
    let input = starlark_run(
        "ctx.resource_list[\"results\"].append({\"message\": \"bad\", \"severity\": \"error\", \"resourceRef\": {\"kind\": \"ConfigMap\", \"name\": \"cfg\"}})\n",
    );
    let (output, error) = failed(&input);
    assert!(
        output.contains("- message: bad\n  severity: error\n  resourceRef:"),
        "{output}"
    );
    assert_eq!(
        String::from_utf8_lossy(&error.log),
        "failed to evaluate function: error: function failure\n"
    );
    let (output, _) = failed(&starlark_run(
        "ctx.resource_list[\"results\"].append({\"msg\": \"typo\"})\n",
    ));
    assert!(
        output.contains("results[0] has the key \"msg\""),
        "{output}"
    );
}

#[test]
fn program_errors_are_error_results_naming_the_line_and_keep_items() {
    let input = starlark_run(
        "x = 1\nfor r in ctx.resource_list[\"items\"]:\n  r[\"metadata\"][\"namespace\"] = \"a\"\nfail(\"no private keys\")\n",
    );
    let (output, error) = failed(&input);
    assert_eq!(
        items_of(&output),
        items_of(&input),
        "items stay as they came"
    );
    assert!(
        output.contains("message: 'prog:4:1: fail: no private keys'"),
        "{output}"
    );
    assert_eq!(error.kind, krm_plugin_api::ErrorKind::Failed);
    let (output, _) = failed(&starlark_run("x = 1\ny = x +\n"));
    assert!(output.contains("prog:2:"), "{output}");
    let (output, _) = failed(&starlark_run("d = {}\nd[\"missing\"]\n"));
    assert!(output.contains("prog:2:1: "), "{output}");
}

#[test]
fn function_config_problems_use_the_catalog_messages() {
    let (output, _) = failed(&input(
        "apiVersion: fn.kpt.dev/v1alpha1\nkind: StarlarkRun\nmetadata:\n  name: x\nsource: \"\"\n",
    ));
    assert!(
        output.contains("message: '`source` must not be empty'"),
        "{output}"
    );
    let (output, _) = failed(&input(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
    ));
    assert!(
        output.contains("but we got: apps/v1, Kind=Deployment"),
        "{output}"
    );
    let no_config =
        format!("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{ITEMS}");
    let (output, _) = failed(&no_config);
    assert!(output.contains("FunctionConfig is missing"), "{output}");
}

#[test]
fn load_offers_the_catalog_libraries() {
    let input = starlark_run(
        "load('encoding/json.star', 'json')\nload('encoding/base64.star', 'base64')\nload('encoding/yaml.star', 'yaml')\nload('hash.star', 'hash')\nload('re.star', 're')\nload('math.star', 'math')\nload('krmfn.star', 'krmfn')\nload('http.star', 'http')\nfor r in ctx.resource_list[\"items\"]:\n  if krmfn.match_gvk(r, \"v1\", \"ConfigMap\") and krmfn.match_name(r, \"cfg\"):\n    d = r[\"data\"]\n    d[\"json\"] = json.encode({\"a\": [1]})\n    d[\"b64\"] = base64.decode(base64.encode(\"hi\"))\n    d[\"yaml\"] = yaml.loads(\"k: [1, two]\")[\"k\"][1]\n    d[\"sha\"] = hash.sha256(\"\")[:8]\n    d[\"re\"] = re.sub(\"(o+)\", \"<\\\\1>\", \"foo\")\n    d[\"floor\"] = str(math.floor(2.7))\n",
    );
    let (output, _) = ok(&input);
    for line in [
        "    json: '{\"a\":[1]}'\n",
        "    b64: hi\n",
        "    yaml: two\n",
        "    sha: e3b0c442\n",
        "    re: f<oo>\n",
        "    floor: \"2\"\n",
    ] {
        assert!(output.contains(line), "{line}missing from\n{output}");
    }
    let (output, _) = failed(&starlark_run(
        "load('http.star', 'http')\nhttp.get(\"http://example.invalid\")\n",
    ));
    assert!(
        output.contains(
            "http.get: the http.star library is not available: network access is not allowed"
        ),
        "{output}"
    );
    let (output, _) = failed(&starlark_run("load('os.star', 'os')\n"));
    assert!(output.contains("no such library"), "{output}");
}

#[test]
fn print_goes_to_the_log_and_catalog_extensions_work() {
    let input = starlark_run(
        "x = set([\"foo\", \"bar\"])\nprint(len(x))\ndef fib(n):\n  return n if n < 2 else fib(n - 1) + fib(n - 2)\nprint(fib(10))\n",
    );
    let (output, log) = ok(&input);
    assert_eq!(output, input);
    assert_eq!(log, "2\n55\n");
}

#[test]
fn runaway_programs_end_with_a_clear_error() {
    for (source, expected) in [
        ("for i in range(1000000000):\n  pass\n", "tick"),
        ("def f(n):\n  return f(n + 1)\nf(0)\n", "stack overflow"),
        ("s = \"x\"\nfor i in range(100):\n  s = s + s\n", "heap"),
        ("l = [0]\nfor i in range(100):\n  l = l + l\n", "heap"),
        // `+` makes at most the sum of its operands: one statement adding a large string to
        // itself goes past the budget by a bounded amount and is stopped there.
        ("s = \"x\" * 200000000\nt = s + s + s\nu = 1\n", "heap"),
        ("l = [0] * 30000000\nm = l + l + l\nu = 1\n", "heap"),
    ] {
        let (output, _) = failed(&starlark_run(source));
        let message = output[output.find("results:").unwrap()..].to_lowercase();
        assert!(message.contains(expected), "{source}: {message}");
        assert!(message.contains("prog:"), "names the line: {message}");
    }
}

/// One expression repeating a sequence past the heap budget is refused before anything is
/// allocated (without the check, the first case asks the allocator for an exabyte and aborts).
#[test]
fn repetitions_past_the_heap_budget_are_refused_before_allocating() {
    for (source, expected) in [
        (
            "s = (\"x\" * 1048576) * 1073741824\n",
            "prog:1:6: repeating a string would make 1125899906842624 bytes",
        ),
        (
            "s = (\"x\" * 1073741824) * 1073741824\n",
            "prog:1:6: repeating a string would make 1073741824 bytes",
        ),
        (
            "s = 1073741824 * \"xy\"\n",
            "prog:1:5: repeating a string would make 2147483648 bytes",
        ),
        (
            "l = [1, 2] * 536870912\n",
            "prog:1:5: repeating a list would make 8589934592 bytes",
        ),
        ("t = (1,) * 2147483647\n", "prog:1:6: repeating a tuple"),
        (
            "def f(x):\n  return x * 1073741824\nf(\"abc\")\n",
            "prog:2:10: repeating a string",
        ),
        ("s = \"x\"\ns *= 3\n", "prog:2:1: `*=` is not supported"),
    ] {
        let (output, _) = failed(&starlark_run(source));
        assert!(output.contains(expected), "{source}: {output}");
        assert!(
            output.contains("heap budget of 256 MiB") || source.contains("*="),
            "{output}"
        );
    }
    // Repetitions within the budget, and numbers, multiply as before.
    let (_, log) = ok(&starlark_run(
        "print(len(\"ab\" * 1000), len([0] * 1000), (1, 2) * 2, 3 * \"x\", 6 * 7, 1.5 * 2, \"x\" * -1)\n",
    ));
    assert_eq!(log, "2000 1000 (1, 2, 1, 2) xxx 42 3.0 \n");
}

#[test]
fn the_sandbox_offers_no_environment_or_files() {
    let (output, _) = failed(&starlark_run("x = ctx.environment[\"PATH\"]\n"));
    assert!(output.contains("PATH"), "{output}");
    let (output, _) = failed(&starlark_run("x = open(\"/etc/passwd\")\n"));
    assert!(output.contains("open"), "{output}");
}

#[test]
fn open_api_is_the_kubernetes_schema_as_kpt_gives_it() {
    let (_, log) = ok(&starlark_run(concat!(
        "d = ctx.open_api[\"definitions\"][\"io.k8s.api.apps.v1.Deployment\"]\n",
        "print(d[\"description\"])\n",
        "spec = d[\"properties\"][\"spec\"][\"$ref\"]\n",
        "print(spec, \"replicas\" in ctx.open_api[\"definitions\"][spec.split(\"/\")[-1]][\"properties\"])\n",
        "print(ctx.open_api[\"swagger\"], len(ctx.open_api[\"definitions\"]) > 100)\n",
    )));
    assert_eq!(
        log,
        "Deployment enables declarative updates for Pods and ReplicaSets.\n\
         #/definitions/io.k8s.api.apps.v1.DeploymentSpec True\n\
         2.0 True\n"
    );
    let (output, _) = failed(&starlark_run(
        "x = ctx.open_api[\"definitions\"][\"nope\"]\n",
    ));
    assert!(
        output.contains("ctx.open_api: key \"nope\" not found"),
        "{output}"
    );
    let (output, _) = failed(&starlark_run(
        "x = ctx.open_api[\"definitions\"][\"io.k8s.api.apps.v1.DeploymentSpec\"][\"required\"][\"x\"]\n",
    ));
    assert!(output.contains("a list is indexed by a number"), "{output}");
}

#[test]
fn bad_output_is_an_error_naming_the_item() {
    let (output, _) = failed(&starlark_run("ctx.resource_list[\"items\"].append(1)\n"));
    assert!(
        output.contains("[\"items\"][2] must be a dict, got int"),
        "{output}"
    );
    let (output, _) = failed(&starlark_run(
        "ctx.resource_list[\"items\"][0][\"spec\"][\"f\"] = len\n",
    ));
    assert!(
        output.contains("items[0].spec.f: a function cannot be written as YAML"),
        "{output}"
    );
}

/// `str`, `repr`, `print`, `json.encode`, `%` and `re.sub` of values sharing one large string (or
/// nesting a shared list, whose text doubles with each level) are refused before their text is
/// built (without the check, each asks the allocator for gigabytes or more and aborts).
#[test]
fn text_past_the_heap_budget_is_refused_before_allocating() {
    const MIB: &str = "s = \"x\" * 1048576\nl = [s] * 1000\n";
    for (source, expected) in [
        (
            format!("{MIB}t = str(l)\n"),
            "prog:3:5: `str()` of this value would make more than the",
        ),
        (
            format!("{MIB}t = repr(l)\n"),
            "prog:3:5: `repr()` of this value would make more than the",
        ),
        (
            "l = [\"x\"]\nfor i in range(100):\n  l = [l, l]\nt = repr(l)\n".to_owned(),
            "prog:4:5: `repr()` of this value would make more than the",
        ),
        (
            format!("{MIB}print(l)\n"),
            "prog:3:1: `print()` of these values would make more than the",
        ),
        (
            format!("load('encoding/json.star', 'json')\n{MIB}t = json.encode(l)\n"),
            "prog:4:5: `json.encode()` of this value would make more than the",
        ),
        (
            format!("{MIB}t = \"%s%s\" % (l, 1)\n"),
            "prog:3:5: formatting a string with `%` would make more than the",
        ),
        (
            format!("{MIB}t = (\"%s\" * 1000) % tuple(l)\n"),
            "prog:3:6: formatting a string with `%` would make 1048580000 bytes, more than the",
        ),
        (
            "load('re.star', 're')\ns = \"x\" * 1048576\nt = re.sub(\"\", s, s)\n".to_owned(),
            "prog:3:5: `re.sub` would make 1099513724928 bytes, more than the",
        ),
        (
            "s = \"%s\"\ns %= 3\n".to_owned(),
            "prog:2:1: `%=` is not supported",
        ),
    ] {
        let (output, _) = failed(&starlark_run(&source));
        assert!(output.contains(expected), "{source}: {output}");
        assert!(
            output.contains("heap budget of 256 MiB") || source.contains("%="),
            "{output}"
        );
    }
    // Text within the budget is written as before.
    let (_, log) = ok(&starlark_run(
        "load('encoding/json.star', 'json')\nc = [1]\nc.append(c)\nprint(str([1, \"a\\n\", None]), repr(\"x\\\"y\"), \"%s-%d-%r\" % (\"a\", 3, \"b\"), \"%s\" % {\"k\": 1}, json.encode({\"a\": [1, \"é\", True]}), 7 % 3, str(\"abc\"), str(c), json.decode(\"[1]\"), str(struct(a = (1,))), str(set([2])))\n",
    ));
    assert_eq!(
        log,
        "[1, \"a\\n\", None] \"x\\\"y\" a-3-\"b\" {\"k\": 1} {\"a\":[1,\"é\",true]} 1 abc [1, [...]] [1] struct(a=(1,)) set([2])\n"
    );
    let (_, log) = ok(&starlark_run("print(len(str(list(range(100000)))))\n"));
    assert_eq!(log, "688890\n");
}

/// `replace`, `join` and `format` of strings are measured before they build their result, however
/// the method is reached (called, taken as a value, through `getattr`), and errors still name the
/// place in the program as written.
#[test]
fn string_methods_past_the_heap_budget_are_refused_before_allocating() {
    const MIB: &str = "s = \"x\" * 1048576\n";
    for (source, expected) in [
        (
            format!("{MIB}t = s.replace(\"\", s)\n"),
            "prog:2:5: `replace` would make 1099513724928 bytes, more than the",
        ),
        (
            format!(
                "{MIB}t = [\n  0,\n  s  # the receiver\n  .replace(\"x\", s + \"y\", 300)][1]\n"
            ),
            "prog:4:3: `replace` would make 315621376 bytes, more than the",
        ),
        (
            format!("{MIB}f = s.replace\nt = f(\"\", s)\n"),
            "prog:3:5: `replace` would make 1099513724928 bytes, more than the",
        ),
        (
            format!("{MIB}t = getattr(s, \"replace\")(\"\", s)\n"),
            "prog:2:5: `replace` would make 1099513724928 bytes, more than the",
        ),
        (
            format!("{MIB}t = \"\".join([s] * 300)\n"),
            "prog:2:5: `join` would make more than the",
        ),
        (
            format!("{MIB}t = (\"-\".join([\"{{0}}\"] * 300)).format(s)\n"),
            "prog:2:6: formatting a string with `format` would make 314574599 bytes, more than the",
        ),
    ] {
        let (output, _) = failed(&starlark_run(&source));
        assert!(output.contains(expected), "{source}: {output}");
        assert!(output.contains("heap budget of 256 MiB"), "{output}");
    }
    // Forty lists nesting one list stand for 2^40 copies once written out.
    const SHARED: &str = "l = [1]\nfor i in range(40):\n  l = [l, l]\n";
    let (output, _) = failed(&starlark_run(&format!(
        "{SHARED}ctx.resource_list[\"items\"][0][\"x\"] = l\n"
    )));
    assert!(
        output.contains("ctx.resource_list would be written as more than 268435456 bytes"),
        "{output}"
    );
    let (output, _) = failed(&starlark_run(&format!(
        "load('encoding/yaml.star', 'yaml')\n{SHARED}t = yaml.dumps(l)\n"
    )));
    assert!(
        output.contains("prog:5:5: `yaml.dumps()` of this value would make more than the"),
        "{output}"
    );
    // Within the budget, and on values that are not strings, the methods are the interpreter's.
    let (_, log) = ok(&starlark_run(
        "s = struct(replace = lambda a: a + 1, join = 2)\nf = \"a-b\".replace\nprint(\"a-b\".replace(\"-\", \"+\"), f(\"a\", \"c\", 1), \",\".join([\"x\", \"y\"]), \"{}={x}\".format(1, x = 2), s.replace(1), s.join, getattr(\"ab\", \"join\")([\"1\", \"2\"]), getattr(s, \"nope\", 3), hasattr(\"\", \"format\"))\n",
    ));
    assert_eq!(log, "a+b c-b x,y 1=2 2 2 1ab2 3 True\n");
    let (_, log) = ok(&starlark_run(
        "t = (\"{}-{}\".format(\"a\", \"b\")).replace(\"-\", \"+\")\nu = (\"-\"  # sep\n  .join([\"c\", \"d\"])\n  .replace(\"c\", \"e\"))\nv = \"x\" \\\n  .replace(\"x\", \"y\")\nprint(t, u, v)\n",
    ));
    assert_eq!(log, "a+b e-d y\n");
    let (output, _) = failed(&starlark_run(
        "t = (\"a\"\n  .replace(\"a\", \"b\"))\nfail(\"x\" + t)\n",
    ));
    assert!(output.contains("prog:3:1: fail: xb"), "{output}");
    let (output, _) = failed(&starlark_run("x = [1].join\n"));
    assert!(output.contains("prog:1:5: "), "{output}");
    assert!(output.contains("join"), "{output}");
    let (output, _) = failed(&starlark_run("t = \"a\".join([1])\n"));
    assert!(output.contains("prog:1:5: "), "{output}");
}
