//! ConfigHub's typed functions inside the library (`Executor::invoke`, request in, response
//! out): get-image and set-replicas, and a sequence of five (a where-filter filter, then
//! set-replicas, set-image, set-label and get-replicas), over 100 and 1,000 Deployments; and
//! AppConfig/Properties' get-int-path and set-string-path over files of 1,000 and 10,000
//! properties (the conversion to the YAML model and back included). The same work as a
//! process: `krm-runner do`/`doseq` (see the README's ConfigHub section).
//!
//! ```sh
//! cargo bench -p krm-function-executor --bench executor
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use krm_function_executor::Executor;
use krm_function_executor::api::{
    APPCONFIG_PROPERTIES, FunctionArgument, FunctionInvocation, FunctionInvocationRequest,
};

fn deployments(n: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{i}\n  namespace: ns-{}\n  labels:\n    app: app-{i}\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: app-{i}\n  template:\n    metadata:\n      labels:\n        app: app-{i}\n    spec:\n      containers:\n      - name: main\n        image: nginx:1.25 # pinned\n---\n",
            i % 10
        ));
    }
    out.into_bytes()
}

fn invocation(name: &str, arguments: &[&str]) -> FunctionInvocation {
    FunctionInvocation::new(
        name,
        arguments
            .iter()
            .map(|value| FunctionArgument::positional(*value))
            .collect(),
    )
}

fn bench(c: &mut Criterion) {
    let executor = Executor::kubernetes();
    let cases: [(&str, Vec<FunctionInvocation>, usize); 3] = [
        ("get-image", vec![invocation("get-image", &["main"])], 0),
        ("set-replicas", vec![invocation("set-replicas", &["5"])], 0),
        (
            "sequence-of-5",
            vec![
                invocation("where-filter", &["apps/v1/Deployment", "spec.replicas > 1"]),
                invocation("set-replicas", &["5"]),
                invocation("set-image", &["main", "nginx:1.27"]),
                invocation("set-label", &["tier", "web"]),
                invocation("get-replicas", &[]),
            ],
            1,
        ),
    ];
    for (name, invocations, num_filters) in cases {
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        group.warm_up_time(std::time::Duration::from_millis(500));
        group.measurement_time(std::time::Duration::from_secs(3));
        for n in [100, 1_000] {
            let request = FunctionInvocationRequest {
                config_data: deployments(n),
                cast_string_args_to_scalars: true,
                combine_validation_results: true,
                num_filters,
                function_invocations: invocations.clone(),
                ..FunctionInvocationRequest::default()
            };
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), &request, |b, request| {
                b.iter(|| {
                    let response = executor.invoke(request).unwrap();
                    assert!(response.success, "{:?}", response.error_messages);
                    response
                })
            });
        }
        group.finish();
    }
}

/// A properties file of `n` keys in groups of ten, with a comment before each group.
fn properties(n: usize) -> Vec<u8> {
    let mut out = String::from("configHub.configSchema=Bench\n");
    for i in 0..n {
        if i % 10 == 0 {
            out.push_str(&format!("# group {}\n", i / 10));
        }
        out.push_str(&format!(
            "service{}.setting{} = value {i}\n",
            i / 10,
            i % 10
        ));
    }
    out.push_str("db.pool.size=10\n");
    out.into_bytes()
}

fn bench_properties(c: &mut Criterion) {
    let executor = Executor::properties();
    let cases = [
        (
            "properties-get-int-path",
            invocation("get-int-path", &["Bench", "db.pool.size"]),
        ),
        (
            "properties-set-string-path",
            invocation(
                "set-string-path",
                &["Bench", "service7.setting3", "changed"],
            ),
        ),
    ];
    for (name, invocation) in cases {
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        group.warm_up_time(std::time::Duration::from_millis(500));
        group.measurement_time(std::time::Duration::from_secs(3));
        for n in [1_000, 10_000] {
            let mut request = FunctionInvocationRequest {
                config_data: properties(n),
                cast_string_args_to_scalars: true,
                function_invocations: vec![invocation.clone()],
                ..FunctionInvocationRequest::default()
            };
            request.context.toolchain_type = APPCONFIG_PROPERTIES.to_owned();
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::from_parameter(n), &request, |b, request| {
                b.iter(|| {
                    let response = executor.invoke(request).unwrap();
                    assert!(response.success, "{:?}", response.error_messages);
                    response
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench, bench_properties);
criterion_main!(benches);
