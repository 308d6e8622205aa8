//! Where Kubernetes resources refer to others by name: kustomize's name-reference field specs
//! as ConfigHub reads them (`third_party/kustomize/namereference.go`, registered by
//! `function/internal/handlers/kubernetes/standard_functions.go` initStandardFunctions),
//! transcribed into krm-runner's form with ConfigHub's rules applied:
//!
//! - a type is ConfigHub's gvkString of the spec's group, version and kind: an empty group is
//!   the kind's group from its noncoreDefaultGroup list (none, the core group, for the kinds
//!   it does not list), an empty version `v1` (`v2` for a HorizontalPodAutoscaler);
//! - a path is the spec's `/`-separated path joined with dots, each segment of ConfigHub's
//!   segmentIsArray list (containers, initContainers, volumes, env, envFrom, sources,
//!   imagePullSecrets, parameters, paths, webhooks, subjects, apiGroups, nonResourceURLs,
//!   resources, resourceNames, verbs, rules) followed by `*`;
//! - the Ingress TLS secret, listed twice, is listed once.
//!
//! Where that derivation names nothing kustomize meant, krm-runner takes what kustomize means
//! (docs/confighub.md, deliberate differences), each such row noting ConfigHub's form: an
//! IngressClass whose group carries its version, a StorageClass referrer without its group,
//! lists ConfigHub's list lacks (`tls`, `volumeClaimTemplates`), a StorageClass's
//! `parameters`, a map, and annotation keys holding dots and an escaped `/`.

/// Referenced type -> the fields that name a resource of it: (referrer type, path), in the
/// excerpt's order.
#[rustfmt::skip]
pub const NAME_REFERENCES: &[(&str, &[(&str, &str)])] = &[
    ("apps/v1/Deployment", &[
        ("autoscaling/v2/HorizontalPodAutoscaler", "spec.scaleTargetRef.name"),
    ]),
    ("v1/ReplicationController", &[
        ("autoscaling/v2/HorizontalPodAutoscaler", "spec.scaleTargetRef.name"),
    ]),
    ("apps/v1/ReplicaSet", &[
        ("autoscaling/v2/HorizontalPodAutoscaler", "spec.scaleTargetRef.name"),
    ]),
    ("apps/v1/StatefulSet", &[
        ("autoscaling/v2/HorizontalPodAutoscaler", "spec.scaleTargetRef.name"),
    ]),
    ("v1/ConfigMap", &[
        ("v1/Pod", "spec.volumes.*.configMap.name"),
        ("v1/Pod", "spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("v1/Pod", "spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("v1/Pod", "spec.containers.*.envFrom.*.configMapRef.name"),
        ("v1/Pod", "spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("v1/Pod", "spec.volumes.*.projected.sources.*.configMap.name"),
        ("v1/PodTemplate", "template.spec.volumes.*.configMap.name"),
        ("v1/PodTemplate", "template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("v1/PodTemplate", "template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("v1/PodTemplate", "template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("v1/PodTemplate", "template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("v1/PodTemplate", "template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("apps/v1/Deployment", "spec.template.spec.volumes.*.configMap.name"),
        ("apps/v1/Deployment", "spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.volumes.*.configMap.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.volumes.*.configMap.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.volumes.*.configMap.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("batch/v1/Job", "spec.template.spec.volumes.*.configMap.name"),
        ("batch/v1/Job", "spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("batch/v1/Job", "spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("batch/v1/Job", "spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("batch/v1/Job", "spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("batch/v1/Job", "spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.volumes.*.configMap.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.volumes.*.projected.sources.*.configMap.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.containers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.initContainers.*.env.*.valueFrom.configMapKeyRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.containers.*.envFrom.*.configMapRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.initContainers.*.envFrom.*.configMapRef.name"),
        ("v1/Node", "spec.configSource.configMap"),
        ("rbac.authorization.k8s.io/v1/Role", "rules.*.resourceNames.*"),
        ("rbac.authorization.k8s.io/v1/ClusterRole", "rules.*.resourceNames.*"),
        // ConfigHub: path metadata.annotations.nginx.ingress.kubernetes.io\.fastcgi-params-configmap.
        ("networking.k8s.io/v1/Ingress", "metadata.annotations.nginx~1ingress~1kubernetes~1io/fastcgi-params-configmap"),
    ]),
    ("v1/Secret", &[
        ("v1/Pod", "spec.volumes.*.secret.secretName"),
        ("v1/Pod", "spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("v1/Pod", "spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("v1/Pod", "spec.containers.*.envFrom.*.secretRef.name"),
        ("v1/Pod", "spec.initContainers.*.envFrom.*.secretRef.name"),
        ("v1/Pod", "spec.imagePullSecrets.*.name"),
        ("v1/Pod", "spec.volumes.*.projected.sources.*.secret.name"),
        ("v1/PodTemplate", "template.spec.volumes.*.secret.secretName"),
        ("v1/PodTemplate", "template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("v1/PodTemplate", "template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("v1/PodTemplate", "template.spec.containers.*.envFrom.*.secretRef.name"),
        ("v1/PodTemplate", "template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("v1/PodTemplate", "template.spec.imagePullSecrets.*.name"),
        ("v1/PodTemplate", "template.spec.volumes.*.projected.sources.*.secret.name"),
        ("apps/v1/Deployment", "spec.template.spec.volumes.*.secret.secretName"),
        ("apps/v1/Deployment", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("apps/v1/Deployment", "spec.template.spec.imagePullSecrets.*.name"),
        ("apps/v1/Deployment", "spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.volumes.*.secret.secretName"),
        ("apps/v1/ReplicaSet", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.imagePullSecrets.*.name"),
        ("apps/v1/ReplicaSet", "spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.volumes.*.secret.secretName"),
        ("apps/v1/DaemonSet", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.imagePullSecrets.*.name"),
        ("apps/v1/DaemonSet", "spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.volumes.*.secret.secretName"),
        ("apps/v1/StatefulSet", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.imagePullSecrets.*.name"),
        ("apps/v1/StatefulSet", "spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("batch/v1/Job", "spec.template.spec.volumes.*.secret.secretName"),
        ("batch/v1/Job", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("batch/v1/Job", "spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("batch/v1/Job", "spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("batch/v1/Job", "spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("batch/v1/Job", "spec.template.spec.imagePullSecrets.*.name"),
        ("batch/v1/Job", "spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.volumes.*.secret.secretName"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.volumes.*.projected.sources.*.secret.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.initContainers.*.env.*.valueFrom.secretKeyRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.containers.*.envFrom.*.secretRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.initContainers.*.envFrom.*.secretRef.name"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.imagePullSecrets.*.name"),
        // ConfigHub: path spec.tls.secretName.
        ("networking.k8s.io/v1/Ingress", "spec.tls.*.secretName"),
        // ConfigHub: path metadata.annotations.ingress.kubernetes.io\.auth-secret.
        ("networking.k8s.io/v1/Ingress", "metadata.annotations.ingress~1kubernetes~1io/auth-secret"),
        // ConfigHub: path metadata.annotations.nginx.ingress.kubernetes.io\.auth-secret.
        ("networking.k8s.io/v1/Ingress", "metadata.annotations.nginx~1ingress~1kubernetes~1io/auth-secret"),
        // ConfigHub: path metadata.annotations.nginx.ingress.kubernetes.io\.auth-tls-secret.
        ("networking.k8s.io/v1/Ingress", "metadata.annotations.nginx~1ingress~1kubernetes~1io/auth-tls-secret"),
        ("v1/ServiceAccount", "imagePullSecrets.*.name"),
        // ConfigHub: type v1/StorageClass, path parameters.*.secretName.
        ("storage.k8s.io/v1/StorageClass", "parameters.secretName"),
        // ConfigHub: type v1/StorageClass, path parameters.*.adminSecretName.
        ("storage.k8s.io/v1/StorageClass", "parameters.adminSecretName"),
        // ConfigHub: type v1/StorageClass, path parameters.*.userSecretName.
        ("storage.k8s.io/v1/StorageClass", "parameters.userSecretName"),
        // ConfigHub: type v1/StorageClass, path parameters.*.secretRef.
        ("storage.k8s.io/v1/StorageClass", "parameters.secretRef"),
        ("rbac.authorization.k8s.io/v1/Role", "rules.*.resourceNames.*"),
        ("rbac.authorization.k8s.io/v1/ClusterRole", "rules.*.resourceNames.*"),
        ("serving.knative.dev/v1/Service", "spec.template.spec.containers.*.env.*.valueFrom.secretKeyRef.name"),
        ("v1/PersistentVolume", "spec.azureFile.secretName"),
    ]),
    ("v1/Service", &[
        ("apps/v1/StatefulSet", "spec.serviceName"),
        ("networking.k8s.io/v1/Ingress", "spec.rules.*.http.paths.*.backend.serviceName"),
        ("networking.k8s.io/v1/Ingress", "spec.backend.serviceName"),
        ("networking.k8s.io/v1/Ingress", "spec.rules.*.http.paths.*.backend.service.name"),
        ("networking.k8s.io/v1/Ingress", "spec.defaultBackend.service.name"),
        ("apiregistration.k8s.io/v1/APIService", "spec.service.name"),
        ("admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration", "webhooks.*.clientConfig.service.name"),
        ("admissionregistration.k8s.io/v1/MutatingWebhookConfiguration", "webhooks.*.clientConfig.service.name"),
    ]),
    ("rbac.authorization.k8s.io/v1/Role", &[
        ("rbac.authorization.k8s.io/v1/RoleBinding", "roleRef.name"),
    ]),
    ("rbac.authorization.k8s.io/v1/ClusterRole", &[
        ("rbac.authorization.k8s.io/v1/RoleBinding", "roleRef.name"),
        ("rbac.authorization.k8s.io/v1/ClusterRoleBinding", "roleRef.name"),
    ]),
    ("v1/ServiceAccount", &[
        ("rbac.authorization.k8s.io/v1/RoleBinding", "subjects.*.name"),
        ("rbac.authorization.k8s.io/v1/ClusterRoleBinding", "subjects.*.name"),
        ("v1/Pod", "spec.serviceAccountName"),
        ("apps/v1/StatefulSet", "spec.template.spec.serviceAccountName"),
        ("apps/v1/Deployment", "spec.template.spec.serviceAccountName"),
        ("v1/ReplicationController", "spec.template.spec.serviceAccountName"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.serviceAccountName"),
        ("batch/v1/Job", "spec.template.spec.serviceAccountName"),
        ("apps/v1/DaemonSet", "spec.template.spec.serviceAccountName"),
    ]),
    ("v1/PersistentVolumeClaim", &[
        ("v1/Pod", "spec.volumes.*.persistentVolumeClaim.claimName"),
        ("apps/v1/StatefulSet", "spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
        ("apps/v1/Deployment", "spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
        ("v1/ReplicationController", "spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
        ("batch/v1/Job", "spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
        ("apps/v1/DaemonSet", "spec.template.spec.volumes.*.persistentVolumeClaim.claimName"),
    ]),
    ("v1/PersistentVolume", &[
        ("v1/PersistentVolumeClaim", "spec.volumeName"),
        ("rbac.authorization.k8s.io/v1/ClusterRole", "rules.*.resourceNames.*"),
    ]),
    ("storage.k8s.io/v1/StorageClass", &[
        ("v1/PersistentVolume", "spec.storageClassName"),
        ("v1/PersistentVolumeClaim", "spec.storageClassName"),
        // ConfigHub: path spec.volumeClaimTemplates.spec.storageClassName.
        ("apps/v1/StatefulSet", "spec.volumeClaimTemplates.*.spec.storageClassName"),
    ]),
    ("scheduling.k8s.io/v1/PriorityClass", &[
        ("v1/Pod", "spec.priorityClassName"),
        ("apps/v1/StatefulSet", "spec.template.spec.priorityClassName"),
        ("apps/v1/Deployment", "spec.template.spec.priorityClassName"),
        ("v1/ReplicationController", "spec.template.spec.priorityClassName"),
        ("batch/v1/CronJob", "spec.jobTemplate.spec.template.spec.priorityClassName"),
        ("batch/v1/Job", "spec.template.spec.priorityClassName"),
        ("apps/v1/DaemonSet", "spec.template.spec.priorityClassName"),
    ]),
    // ConfigHub: networking.k8s.io/v1/v1/IngressClass (the excerpt writes the version into the group).
    ("networking.k8s.io/v1/IngressClass", &[
        ("networking.k8s.io/v1/Ingress", "spec.ingressClassName"),
    ]),
    ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", &[
        ("admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding", "spec.policyName"),
    ]),
];
