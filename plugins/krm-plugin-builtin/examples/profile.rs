//! Runs one function over N generated Deployments, for profilers: `profile FUNCTION N [REPS]`.

fn resource_list(n: usize, config: &str) -> String {
    let mut out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    for i in 0..n {
        out.push_str(&format!(
            "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-{i}\n    namespace: old\n    labels:\n      app: app-{i}\n  spec:\n    replicas: 1\n    selector:\n      matchLabels:\n        app: app-{i}\n    template:\n      metadata:\n        labels:\n          app: app-{i}\n      spec:\n        containers:\n        - name: app\n          image: nginx:1.20.2\n"
        ));
    }
    out.push_str("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n");
    out.push_str(config);
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let function = args.get(1).map_or("set-labels", String::as_str);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let config = match function {
        "set-namespace" => "    namespace: new\n",
        _ => "    tier: web\n",
    };
    let input = resource_list(n, config);
    let start = std::time::Instant::now();
    let mut len = 0;
    for _ in 0..reps {
        let out = krm_plugin_builtin::run_function(function, input.as_bytes()).unwrap();
        len += out.resource_list.len();
    }
    let per = start.elapsed() / reps as u32;
    eprintln!("{function} n={n}: {per:?} per run ({len} bytes out)");
}
