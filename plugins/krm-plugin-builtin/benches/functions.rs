//! set-namespace and set-labels over 10 .. 10,000 Deployments, timed inside the library.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

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

fn bench(c: &mut Criterion) {
    for (function, config) in [
        ("set-namespace", "    namespace: new\n"),
        ("set-labels", "    tier: web\n"),
    ] {
        let mut group = c.benchmark_group(function);
        group.sample_size(10);
        group.warm_up_time(std::time::Duration::from_millis(500));
        group.measurement_time(std::time::Duration::from_secs(2));
        for n in [10, 100, 1_000, 10_000] {
            let input = resource_list(n, config);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), &input, |b, input| {
                b.iter(|| krm_plugin_builtin::run_function(function, input.as_bytes()).unwrap())
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
