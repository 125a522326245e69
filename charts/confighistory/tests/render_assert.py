#!/usr/bin/env python3
"""Structural assertions on one `helm template` render of the confighistory chart.

Reads the rendered objects as a stream of JSON documents on stdin (tests/check
converts helm's YAML with `kubectl patch --local -o json`, which needs no
cluster and no PyYAML) and checks them against the expectations given as
KEY=VALUE arguments:

  release, namespace  the helm release name and namespace
  kube                the Kubernetes version the chart was rendered for
  tls                 server (default) | generate | certManager | certManagerIssuer | secret | none
  url                 webhook URL (url mode), empty otherwise
  cabundle            expected caBundle (secret and url modes)
  failure             expected failurePolicy of the main webhooks
  timeout             expected timeoutSeconds of the main webhooks
  deployment          true | false
  replicas            expected replicas
  exclude             comma list of admin-excluded namespaces
  servicemonitor      true | false
  dashboards          true | false: the Grafana dashboard ConfigMap and the PrometheusRule
  sa                  expected ServiceAccount name; sacreate true | false
  nslabel             KEY=VALUE expected as the webhooks' namespaceSelector.matchLabels
                      (webhook.namespaceSelector) and as the controller loops' selector
  env.NAME            expected value of one container env variable
  secrets=true        secrets.enabled: the Secret webhook, protection and RBAC (docs/behaviour.md §4a)
  secretslabel=K=V    secrets.namespaceSelector.matchLabels
  port, healthport    expected container ports (default 8443, 8080); hostnetwork true | false
  helmtest            namespace of the `helm test` Pod's Role (default `default`), or `false`
  installcheck        true | false: the post-install/post-upgrade check Job (default true with
                      the Deployment); installwait: its --wait-seconds (default 120)
  job                 expected `job` label the target alerts select on (default: the full name)
  commonlabels        K=V,K=V expected on every object and pod template (commonLabels)
  cpulimit            expected CPU limit of the server container (default: none)
  podmonitor          true | false; monitorns: namespace of the monitor (default: the release's)
  scrape              the monitor's settings, INTERVAL,TIMEOUT,SCHEME,RELABELINGS,METRICRELABELINGS
                      (counts of the admin's relabelings), e.g. 30s,10s,https,1,1
  extraargs           comma list of arguments expected after `serve`
  extravolume         NAME:MOUNTPATH of a volume expected in the pod and mounted in the container
  dnspolicy, ndots    expected dnsPolicy and dnsConfig ndots option of the pods
  deployannotation    K=V expected on the Deployment object (deploymentAnnotations)
  apiserverpeers      number of networkPolicy.apiServerPeers expected after the CIDRs
  metricspod          K=V expected as the metrics rule's podSelector.matchLabels

Prints one line per check group and exits 1 on the first failed assertion.
"""
import base64
import json
import os
import re
import sys

from objects import read_docs


def fail(msg):
    print(f"    FAIL: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def version_tuple(v):
    parts = v.lstrip("v").split("-")[0].split("+")[0].split(".")
    return tuple(int(p) for p in (parts + ["0", "0"])[:3])


def main():
    exp = dict(a.split("=", 1) for a in sys.argv[1:])
    docs = read_docs(sys.stdin.read())
    release, ns = exp["release"], exp["namespace"]
    kube = version_tuple(exp["kube"])
    fullname = release if "confighistory" in release else f"{release}-confighistory"
    url = exp.get("url", "")
    deployment = exp.get("deployment", "true") == "true"
    tls = exp.get("tls", "server")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    def one(kind, name=None):
        objs = [d for d in by_kind.get(kind, []) if name is None or d["metadata"]["name"] == name]
        check(len(objs) == 1, f"expected one {kind} {name or ''}, found {len(objs)}")
        return objs[0]

    # --- which objects are rendered -----------------------------------------
    kinds = sorted(by_kind)
    hook = kube < (1, 21, 0) and not url
    expected = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ConfigMap"}
    if exp.get("sacreate", "true") == "false":
        expected.discard("ServiceAccount")
    # `helm test`'s Pod and its own ServiceAccount.
    helmtest = exp.get("helmtest", "default")
    if helmtest != "false":
        expected |= {"Pod", "ServiceAccount"}
    # The post-install/post-upgrade check: a Job with a ServiceAccount, Role and RoleBinding.
    installcheck = deployment and exp.get("installcheck", "true") != "false"
    if installcheck:
        expected |= {"Job", "ServiceAccount", "Role", "RoleBinding"}
    if deployment:
        expected |= {"Deployment", "Service"}
        if int(exp.get("replicas", "2")) > 1:
            expected.add("PodDisruptionBudget")
        expected |= {"generate": {"Secret"}, "certManager": {"Certificate", "Issuer"},
                     "certManagerIssuer": {"Certificate"}}.get(tls, set())
        if exp.get("servicemonitor") == "true":
            expected.add("ServiceMonitor")
        if exp.get("podmonitor") == "true":
            expected.add("PodMonitor")
        if exp.get("networkpolicy", "true") == "true":
            expected.add("NetworkPolicy")
        if exp.get("clientca"):
            expected.add("ConfigMap")
    if exp.get("dashboards") == "true" or exp.get("alerts") == "true":
        expected.add("PrometheusRule")
    if exp.get("dashboards") == "true":
        expected |= {"ConfigMap", "PrometheusRule"}
        dash = one("ConfigMap", f"{fullname}-dashboard")
        check(dash["metadata"]["labels"].get("grafana_dashboard") == "1", "dashboard ConfigMap has the sidecar label")
        check(json.loads(dash["data"]["confighistory.json"])["uid"] == "confighistory", "dashboard JSON parses")
        alerts = [r for g in one("PrometheusRule", fullname)["spec"]["groups"] for r in g["rules"]]
        rules = [r["alert"] for r in alerts]
        check(rules == ["ConfighistoryWebhookFailingOpen", "ConfighistoryWebhookCallsFailing",
                        "ConfighistoryWebhookBlockingWrites", "ConfighistoryDown", "ConfighistoryNoLeader",
                        "ConfighistoryWorkloadsBehindHead", "ConfighistoryPropagationStuck",
                        "ConfighistorySnapshotProtectionDenying",
                        "ConfighistoryWebhookErrors", "ConfighistoryCertificateExpiring"], f"alerts {rules}")
        # Each alert's runbook is a section of docs/operations.md, linked by its anchor.
        with open(os.path.join(os.path.dirname(__file__), "../../../docs/operations.md")) as f:
            headings = {line[4:].strip().lower() for line in f if line.startswith("### ")}
        for r in alerts:
            anchor = r["alert"].lower()
            check(anchor in headings, f"docs/operations.md has no runbook section for {r['alert']}")
            check(r["annotations"]["runbook"] == f"docs/operations.md#{anchor}", f"{r['alert']} runbook {r['annotations']}")
            if exp.get("runbookbase"):
                check(r["annotations"].get("runbook_url") == f"{exp['runbookbase']}#{anchor}",
                      f"{r['alert']} runbook_url {r['annotations'].get('runbook_url')}")
        by_alert = {r["alert"]: r["expr"] for r in alerts}
        # The API server's webhook metrics, for exactly the webhook names the configurations register.
        for alert, metric in (("ConfighistoryWebhookFailingOpen", "apiserver_admission_webhook_fail_open_count"),
                              ("ConfighistoryWebhookCallsFailing", "apiserver_admission_webhook_request_total"),
                              ("ConfighistoryWebhookBlockingWrites", "apiserver_admission_webhook_rejection_count")):
            expr = by_alert[alert]
            check(metric + "{" in expr, f"{alert} does not query {metric}: {expr}")
            pattern = re.search(r'name=~"([^"]*)"', expr).group(1).replace("\\\\", "\\")
            registered = [w["name"] for d in docs if d["kind"].endswith("WebhookConfiguration") for w in d["webhooks"]]
            check(registered and all(re.fullmatch(pattern, n) for n in registered), f"{alert}: {pattern} misses one of {registered}")
        check('code!="200"' in by_alert["ConfighistoryWebhookCallsFailing"], "calls failing: by code")
        job = exp.get("job", fullname)
        for alert in ("ConfighistoryDown", "ConfighistoryNoLeader", "ConfighistoryPropagationStuck"):
            check(f'job="{job}", namespace="{ns}"' in by_alert[alert], f"{alert} selects {by_alert[alert]}")
        check("confighistory_leader{" in by_alert["ConfighistoryNoLeader"], "no leader: the leader gauge")
        stuck = int(exp.get("stuckminutes", "10")) * 60
        check(by_alert["ConfighistoryPropagationStuck"].startswith("max(confighistory_propagation_oldest_pending_seconds{")
              and by_alert["ConfighistoryPropagationStuck"].endswith(f"> {stuck}"),
              f"stuck propagation after {stuck} s: {by_alert['ConfighistoryPropagationStuck']}")
        check("confighistory_tls_certificate_not_after_timestamp_seconds" in by_alert["ConfighistoryCertificateExpiring"],
              "expiry alert on the _timestamp_seconds gauge")
        print(f"    alerts: {len(alerts)}, each with its runbook section; API server webhook metrics match the webhooks")
    if exp.get("guard"):
        expected |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    if hook:
        expected |= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    check(set(kinds) == expected, f"kinds {kinds} != expected {sorted(expected)}")
    print(f"    objects: {', '.join(f'{k}x{len(by_kind[k])}' for k in kinds)}")

    # --- commonLabels: on every object and on every pod template ------------------
    common = dict(kv.split("=", 1) for kv in exp.get("commonlabels", "").split(",") if kv)
    if common:
        for d in docs:
            where = f"{d['kind']}/{d['metadata']['name']}"
            labels = d["metadata"].get("labels") or {}
            check(all(labels.get(k) == v for k, v in common.items()), f"{where}: labels {labels} lack commonLabels {common}")
            template = d.get("spec", {}).get("template")
            if template is not None:
                tl = template["metadata"].get("labels") or {}
                check(all(tl.get(k) == v for k, v in common.items()), f"{where}: pod template labels {tl} lack {common}")
        print(f"    commonLabels {common} on all {len(docs)} objects and their pod templates")
    else:
        # The chart adds no label of its own outside its conventions.
        extra = {k for d in docs for k in (d["metadata"].get("labels") or {})
                 if d["kind"] not in ("ConfigMap", "ServiceMonitor", "PodMonitor", "PrometheusRule")
                 and not k.startswith(("app.kubernetes.io/", "helm.sh/"))}
        check(not extra, f"labels without commonLabels: {sorted(extra)}")

    # --- Prometheus Operator monitors -------------------------------------------------
    job = exp.get("job", fullname)
    for kind, flag, port, endpoints in (("ServiceMonitor", "servicemonitor", "metrics", "endpoints"),
                                        ("PodMonitor", "podmonitor", "health", "podMetricsEndpoints")):
        if exp.get(flag) != "true":
            check(kind not in by_kind, f"{kind} rendered without {flag}=true")
            continue
        mon = one(kind, fullname)
        check(mon["metadata"]["namespace"] == exp.get("monitorns", ns), f"{kind} namespace {mon['metadata']['namespace']}")
        check(mon["spec"]["namespaceSelector"] == {"matchNames": [ns]}, f"{kind} namespaceSelector {mon['spec']['namespaceSelector']}")
        if deployment:
            want_sel = one("Deployment", fullname)["spec"]["selector"]
            check(mon["spec"]["selector"] == want_sel, f"{kind} selector {mon['spec']['selector']} != the server's {want_sel}")
        (ep,) = mon["spec"][endpoints]
        interval, timeout, scheme, relabels, metric_relabels = (exp.get("scrape") or ",,http,0,0").split(",")
        check(ep["port"] == port and ep["path"] == "/metrics", f"{kind} endpoint {ep}")
        check(ep.get("interval", "") == interval and ep.get("scrapeTimeout", "") == timeout, f"{kind} interval/timeout {ep}")
        check(ep["scheme"] == scheme and ("tlsConfig" in ep) == (scheme == "https"), f"{kind} scheme/tlsConfig {ep}")
        # The alerts select the targets by job: the first relabeling sets it, the admin's follow.
        check(ep["relabelings"][0] == {"action": "replace", "targetLabel": "job", "replacement": job},
              f"{kind} does not set job={job}: {ep['relabelings']}")
        check(len(ep["relabelings"]) == 1 + int(relabels), f"{kind} relabelings {ep['relabelings']}")
        check(len(ep.get("metricRelabelings", [])) == int(metric_relabels), f"{kind} metricRelabelings {ep.get('metricRelabelings')}")
        print(f"    {kind} in {mon['metadata']['namespace']}: port {port}, {scheme}, job={job}, "
              f"{relabels} + {metric_relabels} relabelings")

    # --- webhook configurations ---------------------------------------------
    mwc = one("MutatingWebhookConfiguration", fullname)
    vwc = one("ValidatingWebhookConfiguration", fullname)
    mw = {w["name"]: w for w in mwc["webhooks"]}
    vw = {w["name"]: w for w in vwc["webhooks"]}
    secrets = exp.get("secrets") == "true"
    # The Secrets webhook is always there (no rule with Secrets off): turning Secrets on or off
    # never adds or removes a webhook (docs/install.md "Upgrades that change the webhooks").
    check(list(mw) == ["configmaps.confighistory.io", "workloads.confighistory.io", "secrets.confighistory.io"],
          f"mutating webhooks {list(mw)}")
    check(list(vw) == ["workloads.confighistory.io", "snapshots.confighistory.io",
                       "snapshot-deletes.confighistory.io"], f"validating webhooks {list(vw)}")

    excluded = ["kube-system", "kube-public", "kube-node-lease", ns] + \
        [n for n in exp.get("exclude", "").split(",") if n]
    main_failure = exp.get("failure", "Ignore")
    main_timeout = int(exp.get("timeout", "5"))
    if url:
        want_ca = exp["cabundle"] or None  # none: a server in tls.mode=server writes it
    elif tls == "generate":
        want_ca = one("Secret", f"{fullname}-tls")["data"]["ca.crt"]
    elif tls == "server":
        want_ca = None  # written by the server, never rendered (docs/operations.md "Certificates")
    elif tls == "secret":
        want_ca = exp["cabundle"]
    else:
        want_ca = None  # injected by cert-manager
    inject = (mwc["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
    for cfg in (mwc, vwc):
        got = (cfg["metadata"].get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        if tls.startswith("certManager") and not url:
            check(got == f"{ns}/{fullname}-tls", f"{cfg['kind']} inject-ca-from {got!r}")
        else:
            check(got is None, f"{cfg['kind']} must not carry inject-ca-from outside certManager mode")

    workload_rules = [
        {"apiGroups": ["apps"], "apiVersions": ["v1"],
         "resources": ["deployments", "statefulsets", "daemonsets"],
         "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
        {"apiGroups": ["batch"], "apiVersions": ["v1", "v1beta1"], "resources": ["jobs", "cronjobs"],
         "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
    ]
    argo = exp.get("argorollouts") == "true"
    if argo:
        # A registered kind (docs/behaviour.md §4b): its group's rule after the built-ins'.
        workload_rules.append({"apiGroups": ["argoproj.io"], "apiVersions": ["v1alpha1"], "resources": ["rollouts"],
                               "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"})

    def cm_rules(ops, resources=("configmaps",)):
        return [{"apiGroups": [""], "apiVersions": ["v1"], "resources": list(resources),
                 "operations": ops, "scope": "Namespaced"}]

    # Snapshot protection covers Secret snapshots only where Secrets are on.
    protected = ("configmaps", "secrets") if secrets else ("configmaps",)

    def hash_selector(op):
        return {"matchExpressions": [{"key": "confighistory.io/hash", "operator": op}]}

    spec = {
        ("M", "configmaps.confighistory.io"): ("/mutate", cm_rules(["CREATE", "UPDATE"]),
                                               hash_selector("DoesNotExist"), main_failure, main_timeout),
        ("M", "workloads.confighistory.io"): ("/mutate", workload_rules, None, main_failure, main_timeout),
        ("V", "workloads.confighistory.io"): ("/validate", workload_rules, None, main_failure, main_timeout),
        ("V", "snapshots.confighistory.io"): ("/protect", cm_rules(["CREATE", "UPDATE"], protected),
                                              hash_selector("Exists"), "Fail", None),
        ("V", "snapshot-deletes.confighistory.io"): ("/protect", cm_rules(["DELETE"], protected),
                                                     hash_selector("Exists"), "Ignore", None),
    }
    # Never sources kept out of the path: snapshots, and Helm's release records by label.
    spec[("M", "secrets.confighistory.io")] = (
        "/mutate", cm_rules(["CREATE", "UPDATE"], ("secrets",)) if secrets else [],
        {"matchExpressions": [{"key": "confighistory.io/hash", "operator": "DoesNotExist"},
                              {"key": "owner", "operator": "NotIn", "values": ["helm"]}]},
        main_failure, main_timeout)
    for (which, name), (path, rules, objsel, failure, timeout) in spec.items():
        w = (mw if which == "M" else vw)[name]
        where = f"{'mutating' if which == 'M' else 'validating'} {name}"
        check(w["admissionReviewVersions"] == ["v1"], f"{where}: admissionReviewVersions")
        check(w["sideEffects"] == "NoneOnDryRun", f"{where}: sideEffects")
        check(w["matchPolicy"] == "Equivalent", f"{where}: matchPolicy")
        check(w["rules"] == rules, f"{where}: rules {w['rules']}")
        check(all("/" not in r for rule in w["rules"] for r in rule["resources"]),
              f"{where}: subresources must not be intercepted")
        check(w.get("objectSelector") == objsel, f"{where}: objectSelector {w.get('objectSelector')}")
        check(w["failurePolicy"] == failure, f"{where}: failurePolicy {w['failurePolicy']} != {failure}")
        if timeout is not None:
            check(w["timeoutSeconds"] == timeout, f"{where}: timeoutSeconds {w['timeoutSeconds']}")
        else:
            check(w["timeoutSeconds"] < main_timeout or w["timeoutSeconds"] == 1,
                  f"{where}: protection timeout must stay below the main one")
        if which == "M":
            check(w.get("reinvocationPolicy") == "IfNeeded", f"{where}: reinvocationPolicy")
        cc = w["clientConfig"]
        if url:
            check(cc.get("url") == url.rstrip("/") + path and "service" not in cc,
                  f"{where}: clientConfig {cc}")
        else:
            svc = cc.get("service", {})
            check(svc == {"name": fullname, "namespace": ns, "path": path, "port": 443},
                  f"{where}: clientConfig.service {svc}")
        check(cc.get("caBundle") == want_ca, f"{where}: caBundle does not match the expected CA")
        sel = w["namespaceSelector"]["matchExpressions"]
        # No label a namespace owner can set (docs/behaviour.md §9a): the exclude label only where
        # namespaces have no name label to select on (< 1.21), and never for protection.
        label_term = kube < (1, 21, 0) and not name.startswith("snapshot")
        check(len(sel) == (2 if label_term else 1), f"{where}: namespaceSelector {sel}")
        check(sel[0]["key"] == "kubernetes.io/metadata.name" and sel[0]["operator"] == "NotIn"
              and sorted(sel[0]["values"]) == sorted(set(excluded)),
              f"{where}: name exclusion {sel[0]} != {excluded}")
        if label_term:
            check(sel[1] == {"key": "confighistory.io/exclude", "operator": "DoesNotExist"},
                  f"{where}: label exclusion {sel[1]}")
        check(label_term or not any(e["key"] == "confighistory.io/exclude" for e in sel),
              f"{where}: a tenant-settable label in the namespaceSelector {sel}")
        check(not any("confighistory.io/mode" in e["key"] for e in sel),
              f"{where}: must not select on the mode label")
        want_labels = dict([exp["nslabel"].split("=", 1)]) if exp.get("nslabel") else None
        if name == "secrets.confighistory.io" and exp.get("secretslabel"):
            want_labels = dict(want_labels or {}, **dict([exp["secretslabel"].split("=", 1)]))
        check(w["namespaceSelector"].get("matchLabels") == want_labels,
              f"{where}: namespaceSelector.matchLabels {w['namespaceSelector'].get('matchLabels')} != {want_labels}")
        mc = w.get("matchConditions")
        if name == "configmaps.confighistory.io" and kube >= (1, 28, 0):
            check(mc and "kube-root-ca.crt" in mc[0]["expression"], f"{where}: matchConditions {mc}")
        elif name == "secrets.confighistory.io" and kube >= (1, 28, 0):
            exprs = " ".join(c["expression"] for c in mc or [])
            check(all(t in exprs for t in ("kubernetes.io/service-account-token", "bootstrap.kubernetes.io/token",
                                             "helm.sh/release.v1", "cert-manager.io/certificate-name")),
                  f"{where}: matchConditions {mc}")
        else:
            check(mc is None, f"{where}: unexpected matchConditions (kube {exp['kube']})")
    print(f"    webhooks: {len(mw)} mutating + 3 validating, paths/rules/selectors/policies ok, "
          f"caBundle {'not rendered' if want_ca is None else 'matches'}, "
          f"matchConditions {'on' if kube >= (1, 28, 0) else 'off'}")

    # --- RBAC -----------------------------------------------------------------
    cr = one("ClusterRole", fullname)
    granted = {}
    for rule in cr["rules"]:
        check("resourceNames" not in rule, "ClusterRole rules must not depend on names")
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                check("*" not in rule["verbs"] and r != "*" and g != "*", f"wildcard in {rule}")
                granted.setdefault((g, r), set()).update(rule["verbs"])
    # Only the verbs the code uses (docs/behaviour.md §9a): writes are creates, merge patches of
    # confighistory's own metadata, and GC deletes.
    want = {
        ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "namespaces"): {"get", "list", "watch"},
        ("apps", "deployments"): {"get", "list", "watch", "patch"},
        ("apps", "statefulsets"): {"get", "list", "watch", "patch"},
        ("apps", "daemonsets"): {"get", "list", "watch", "patch"},
        ("batch", "cronjobs"): {"get", "list", "watch", "patch"},
        ("batch", "jobs"): {"get", "list", "watch"},
        ("apps", "replicasets"): {"get", "list", "watch"},
        ("apps", "controllerrevisions"): {"get", "list", "watch"},
        ("events.k8s.io", "events"): {"create", "patch"},
    }
    if argo:
        want[("argoproj.io", "rollouts")] = {"get", "list", "watch", "patch"}
    check(granted == want, f"ClusterRole grants {granted}")
    role = one("Role", f"{fullname}-leader-election")
    lease = exp.get("lease", fullname)
    check(role["metadata"]["namespace"] == exp.get("leasens", ns), "lease Role namespace")
    check(role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
         "verbs": ["get", "update"]}], f"lease Role rules {role['rules']}")
    sa = exp.get("sa", fullname)
    bindings = [one("ClusterRoleBinding", fullname), one("RoleBinding", f"{fullname}-leader-election")]
    if tls == "server":
        # Server-managed certificates: its own two webhook configurations (get, patch) and its
        # one Secret (create; get, update by name), nothing more.
        certs_cr = one("ClusterRole", f"{fullname}-certs")
        check(certs_cr["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
              "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
              "resourceNames": [fullname], "verbs": ["get", "patch"]}], f"certs ClusterRole {certs_cr['rules']}")
        certs_role = one("Role", f"{fullname}-certs")
        check(certs_role["metadata"]["namespace"] == ns and certs_role["rules"] == [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [f"{fullname}-certs"], "verbs": ["get", "update"]}],
            f"certs Role {certs_role['rules']}")
        bindings += [one("ClusterRoleBinding", f"{fullname}-certs"), one("RoleBinding", f"{fullname}-certs")]
        print("    rbac: server-managed certificates: get/patch on its two webhook configurations, its one Secret by name")
    else:
        check(not any(r["metadata"]["name"] == f"{fullname}-certs" for r in by_kind.get("Role", []) + by_kind.get("ClusterRole", [])),
              "certificate RBAC only in tls.mode=server")
    secrets_roles = [r for r in by_kind.get("ClusterRole", []) if r["metadata"]["name"] == f"{fullname}-secrets"]
    if secrets:
        # Secrets (docs/behaviour.md §4a): a ClusterRole of its own, only when on; no update
        # (delete: GC of Secret snapshots, which the guard policy restricts to snapshots).
        check(len(secrets_roles) == 1 and secrets_roles[0]["rules"] == [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}],
            f"secrets ClusterRole {secrets_roles}")
        bindings.append(one("ClusterRoleBinding", f"{fullname}-secrets"))
        print("    rbac: Secrets on: get/list/watch/create/patch/delete on Secrets in a ClusterRole of its own")
    else:
        check(not secrets_roles and not any(r["metadata"]["name"] == f"{fullname}-secrets" for r in by_kind.get("ClusterRoleBinding", [])),
              "RBAC on Secrets only with secrets.enabled")
    for b in bindings:
        check(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
              f"{b['kind']} subjects {b['subjects']}")
    if exp.get("guard"):
        # docs/behaviour.md §9a: the guard binds to confighistory's own ServiceAccount only and denies.
        vap, vapb = one("ValidatingAdmissionPolicy"), one("ValidatingAdmissionPolicyBinding")
        check(vap["apiVersion"] == exp["guard"] and vapb["apiVersion"] == exp["guard"], f"guard apiVersion {vap['apiVersion']}")
        check(vap["spec"]["failurePolicy"] == "Fail", "guard failurePolicy")
        check(vap["spec"]["matchConditions"] == [{"name": "confighistory-itself", "expression":
              f"request.userInfo.username == 'system:serviceaccount:{ns}:{sa}'"}], f"guard binds {vap['spec']['matchConditions']}")
        rules = {r for rule in vap["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]}
        check(rules == {"configmaps", "deployments", "statefulsets", "daemonsets", "cronjobs"} | ({"rollouts"} if argo else set())
              | ({"secrets"} if secrets else set()), f"guard resources {rules}")
        msgs = [v["message"] for v in vap["spec"]["validations"]]
        for m in ("create only immutable snapshots", "delete only snapshots", "may not change labels",
                  "change only confighistory.io/ annotations", "may not change a ConfigMap's data", "images"):
            check(any(m in x for x in msgs), f"guard lacks {m!r}: {msgs}")
        # With Secrets on, Secret writes too; the server's own keys and certificates Secrets aside.
        check(any("a Secret's data" in x for x in msgs) == secrets, f"guard on Secret data: {msgs}")
        own = [v for v in vap["spec"]["variables"] if v["name"] == "own"]
        check(len(own) == 1 and f"'{fullname}-keys'" in own[0]["expression"] and f"'{fullname}-certs'" in own[0]["expression"]
              and f"request.namespace == '{ns}'" in own[0]["expression"], f"guard's own Secrets {own}")
        check(vapb["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}, f"binding {vapb['spec']}")
        print(f"    guard: {exp['guard']} ValidatingAdmissionPolicy with {len(msgs)} rules on {sa}")
    print(f"    rbac: ClusterRole has exactly the {len(want)} expected resource grants, "
          f"Lease Role limited to {lease!r}")

    # --- the published effective configuration --------------------------------------
    published = f"{fullname}-effective-config"
    pcm = one("ConfigMap", published)
    check(pcm["metadata"]["namespace"] == ns and "annotations" not in pcm["metadata"],
          "the chart renders the effective-config ConfigMap without the server's annotation (no fight over it)")
    reader = one("Role", f"{published}-reader")
    check(reader["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [published],
                               "verbs": ["get"]}], f"reader Role {reader['rules']}")
    rb = one("RoleBinding", f"{published}-reader")
    check(rb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]
          and rb["roleRef"]["name"] == reader["metadata"]["name"], f"reader binding {rb}")
    print(f"    effective config: ConfigMap {published}, readable by system:authenticated (get, that name only)")

    # --- helm test ----------------------------------------------------------------
    if helmtest != "false":
        test = f"{fullname}-test"
        pod = one("Pod", test)
        hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        check(sorted(d["kind"] for d in hooks) == ["Pod", "Role", "RoleBinding", "ServiceAccount"], f"test hooks {hooks}")
        (tc,) = pod["spec"]["containers"]
        check(tc["args"] == ["selftest", "--in-namespace", helmtest], f"test args {tc['args']}")
        check(pod["spec"]["serviceAccountName"] == test and pod["spec"]["restartPolicy"] == "Never", "test pod spec")
        role = one("Role", test)
        check(role["metadata"]["namespace"] == helmtest and role["rules"] == [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "delete"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}], f"test Role {role}")
        check(one("RoleBinding", test)["metadata"]["namespace"] == helmtest, "test RoleBinding namespace")
        if deployment:
            selector = one("Service", fullname)["spec"]["selector"]
            check(not all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items()),
                  "the test pod matches the server's Service/PDB selector")
        print(f"    helm test: selftest in {helmtest}, Role limited to creating/deleting ConfigMaps and creating Deployments")

    # --- the install check ----------------------------------------------------------
    if installcheck:
        name = f"{fullname}-check"
        job = one("Job", name)
        events = "post-install,post-upgrade"
        hooks = sorted(d["kind"] for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == events)
        check(hooks == ["Job", "Role", "RoleBinding", "ServiceAccount"], f"install check hooks {hooks}")
        spec = job["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        ns_check = exp.get("helmtest", "default") if exp.get("helmtest", "default") != "false" else "default"
        wait = exp.get("installwait", "120")
        check(c["args"] == ["selftest", "--in-namespace", ns_check, "--wait-seconds", wait], f"install check args {c['args']}")
        check(job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == int(wait) + 60, "install check Job limits")
        check(spec["serviceAccountName"] == name and spec["restartPolicy"] == "Never", "install check pod spec")
        check(one("Role", name)["rules"] == one("Role", f"{fullname}-test")["rules"] if helmtest != "false" else True,
              "the install check may do what the test may, no more")
        check("hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
              and "hook-failed" not in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
              "a failed install check is kept for its log")
        selector = one("Service", fullname)["spec"]["selector"]
        check(not all(job["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items()),
              "the install check pod matches the server's Service/PDB selector")
        print(f"    install check: selftest in {ns_check} after install and upgrade, trying for {wait} s")

    # --- workload ---------------------------------------------------------------
    if deployment:
        dep = one("Deployment", fullname)
        pod = dep["spec"]["template"]["spec"]
        check(dep["spec"]["replicas"] == int(exp.get("replicas", "2")), "replicas")
        check(pod["serviceAccountName"] == sa, "serviceAccountName")
        psc = pod["securityContext"]
        check(psc.get("runAsNonRoot") is True and psc.get("seccompProfile") == {"type": "RuntimeDefault"},
              f"pod securityContext {psc}")
        (c,) = pod["containers"]
        sc = c["securityContext"]
        check(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False
              and sc.get("capabilities", {}).get("drop") == ["ALL"], f"container securityContext {sc}")
        res = c["resources"]
        check({"cpu", "memory"} <= set(res.get("requests", {})) and "memory" in res.get("limits", {}),
              f"CPU and memory requests and a memory limit: {res}")
        # No CPU limit by default: CFS throttling of a write-path webhook becomes timeouts.
        cpu = res["limits"].get("cpu")
        check((cpu if cpu is None else str(cpu)) == exp.get("cpulimit"), f"CPU limit {cpu!r}, want {exp.get('cpulimit')!r}")
        want_args = ["serve"] + [a for a in exp.get("extraargs", "").split(",") if a]
        check(c["args"] == want_args, f"args {c['args']} != {want_args}")
        check(pod.get("dnsPolicy", "") == exp.get("dnspolicy", "ClusterFirstWithHostNet" if exp.get("hostnetwork") == "true" else ""),
              f"dnsPolicy {pod.get('dnsPolicy')}")
        ndots = [o.get("value") for o in pod.get("dnsConfig", {}).get("options", []) if o["name"] == "ndots"]
        check(ndots == ([exp["ndots"]] if exp.get("ndots") else []), f"dnsConfig {pod.get('dnsConfig')}")
        dep_ann = dep["metadata"].get("annotations") or {}
        check(dep_ann == (dict([exp["deployannotation"].split("=", 1)]) if exp.get("deployannotation") else {}),
              f"Deployment annotations {dep_ann}")
        if exp.get("extravolume"):
            vname, vpath = exp["extravolume"].split(":", 1)
            check(any(v["name"] == vname for v in pod.get("volumes") or []), f"volume {vname} not in {pod.get('volumes')}")
            check(any(m["name"] == vname and m["mountPath"] == vpath for m in c.get("volumeMounts") or []),
                  f"volume {vname} not mounted at {vpath}: {c.get('volumeMounts')}")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        port, health_port = int(exp.get("port", "8443")), int(exp.get("healthport", "8080"))
        check(ports == {"https": port, "health": health_port}, f"ports {ports}")
        host = exp.get("hostnetwork", "false") == "true"
        check(pod.get("hostNetwork", False) == host, f"hostNetwork {pod.get('hostNetwork')}")
        if host:
            anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            check(anti[0]["topologyKey"] == "kubernetes.io/hostname", f"host network: one replica per node {anti}")
        checksum = dep["spec"]["template"]["metadata"]["annotations"].get("checksum/client-ca", "")
        check(re.fullmatch("[0-9a-f]{64}", checksum), f"checksum/client-ca annotation {checksum!r}")
        sleep = c.get("lifecycle", {}).get("preStop", {}).get("sleep")
        check((sleep is not None) == (kube >= (1, 30, 0)),
              f"preStop sleep {sleep} must be rendered exactly on Kubernetes >= 1.30")
        check(c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}, "liveness probe")
        check(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}, "readiness probe")
        env = {e["name"]: e for e in c["env"]}
        check(env["CONFIGHISTORY_LISTEN"]["value"] == f"0.0.0.0:{port}"
              and env["CONFIGHISTORY_HEALTH_LISTEN"]["value"] == f"0.0.0.0:{health_port}", "listen addresses follow the ports")
        check(env["CONFIGHISTORY_EFFECTIVE_CONFIG"]["value"] == published, "CONFIGHISTORY_EFFECTIVE_CONFIG names the chart's ConfigMap")
        check(env["CONFIGHISTORY_NAMESPACE"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
              == "metadata.namespace", "CONFIGHISTORY_NAMESPACE from the downward API")
        check(list(env).index("CONFIGHISTORY_NAMESPACE") < list(env).index("CONFIGHISTORY_IDENTITY"),
              "CONFIGHISTORY_NAMESPACE must precede CONFIGHISTORY_IDENTITY, which expands it")
        check(env["CONFIGHISTORY_IDENTITY"]["value"]
              == f"system:serviceaccount:$(CONFIGHISTORY_NAMESPACE):{sa}", "identity")
        check(sorted(env["CONFIGHISTORY_EXCLUDE_NAMESPACES"]["value"].split(",")) == sorted(set(excluded)),
              "CONFIGHISTORY_EXCLUDE_NAMESPACES")
        check(env["CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR"]["value"] == exp.get("nslabel", ""),
              "CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR: the loops act where the webhooks do")
        want_secrets_env = {"CONFIGHISTORY_SECRETS": "true",
                            "CONFIGHISTORY_SECRETS_NAMESPACE_SELECTOR": exp.get("secretslabel", ""),
                            "CONFIGHISTORY_KEYS_SECRET": f"{fullname}-keys"} if secrets else {}
        got_secrets_env = {k: v.get("value") for k, v in env.items() if k.startswith("CONFIGHISTORY_SECRETS") or k == "CONFIGHISTORY_KEYS_SECRET"}
        check(got_secrets_env == want_secrets_env, f"Secrets env {got_secrets_env} != {want_secrets_env}")
        for k, v in exp.items():
            if k.startswith("env."):
                name = k[4:]
                check(env.get(name, {}).get("value") == v,
                      f"env {name}={env.get(name, {}).get('value')!r}, want {v!r}")
        tls_env = ("CONFIGHISTORY_TLS_SECRET",) if tls == "server" else ("CONFIGHISTORY_TLS_CERT", "CONFIGHISTORY_TLS_KEY")
        for name in tls_env + ("CONFIGHISTORY_LISTEN", "CONFIGHISTORY_HEALTH_LISTEN", "CONFIGHISTORY_DEFAULT_MODE", "CONFIGHISTORY_ALLOWED_MODES",
                     "CONFIGHISTORY_EXCLUDED_SOURCES_SELECTOR", "CONFIGHISTORY_SETTLE",
                     "CONFIGHISTORY_PROPAGATION_QPS", "CONFIGHISTORY_PROPAGATION_BURST",
                     "CONFIGHISTORY_PROPAGATION_NAMESPACE_QPS", "CONFIGHISTORY_PROPAGATION_NAMESPACE_BURST",
                     "CONFIGHISTORY_RESYNC_INTERVAL", "CONFIGHISTORY_RESYNC_QPS",
                     "CONFIGHISTORY_GC_KEEP", "CONFIGHISTORY_GC_GRACE", "CONFIGHISTORY_GC_INTERVAL",
                     "CONFIGHISTORY_LEADER_ELECTION_NAMESPACE", "CONFIGHISTORY_LEASE_NAME",
                     "CONFIGHISTORY_LOG_FORMAT", "RUST_LOG", "CONFIGHISTORY_SNAPSHOT_CREATORS"):
            check(name in env, f"env {name} missing")
        extra = env.get("CONFIGHISTORY_EXTRA_WORKLOAD_KINDS", {}).get("value")
        if argo:
            # The server reads the entries as the chart's values give them.
            got = json.loads(extra or "[]")
            check([(k["group"], k["kind"], k["history"]["revisionAnnotation"]) for k in got]
                  == [("argoproj.io", "Rollout", "rollout.argoproj.io/revision")], f"extra kinds {extra}")
        else:
            check(extra is None, f"no CONFIGHISTORY_EXTRA_WORKLOAD_KINDS without extraWorkloadKinds: {extra}")
        client_ca = exp.get("clientca", "")
        client_ca_from = exp.get("clientcafrom", "")
        mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
        want_mounts = ({"client-ca"} if client_ca or client_ca_from else set()) | (set() if tls == "server" else {"tls"}) \
            | ({exp["extravolume"].split(":")[0]} if exp.get("extravolume") else set())
        check(set(mounts) == want_mounts, f"volume mounts {list(mounts)}")
        if tls == "server":
            # Nothing mounted: the replicas read the Secret through the API, and write it.
            want_env = {"CONFIGHISTORY_TLS_SECRET": f"{fullname}-certs",
                        "CONFIGHISTORY_TLS_NAMES": f"{fullname},{fullname}.{ns},{fullname}.{ns}.svc,{fullname}.{ns}.svc.cluster.local",
                        "CONFIGHISTORY_WEBHOOK_CONFIGURATIONS": fullname,
                        "CONFIGHISTORY_TLS_VALIDITY": exp.get("tlsvalidity", str(90 * 86400))}
            for k, v in want_env.items():
                check(env.get(k, {}).get("value") == v, f"env {k}={env.get(k)}, want {v!r}")
            check(env["CONFIGHISTORY_REPLICA_ID"].get("valueFrom") == {"fieldRef": {"fieldPath": "metadata.name"}},
                  f"CONFIGHISTORY_REPLICA_ID {env['CONFIGHISTORY_REPLICA_ID']}")
            check("CONFIGHISTORY_TLS_CERT" not in env and "Secret" not in by_kind, "server mode renders no certificate")
        else:
            mount = mounts["tls"]
            check(mount["mountPath"] == "/etc/confighistory/tls" and "subPath" not in mount,
                  "TLS Secret must be mounted as a directory (no subPath) so rotation reaches the server")
        if client_ca or client_ca_from:
            # mTLS (docs/behaviour.md 9a.3): the API server's client CA, mounted as a directory
            # (the kubelet updates it in place, the server reloads it), and the names pinned.
            ca_vol = next(v for v in pod["volumes"] if v["name"] == "client-ca")
            if client_ca:
                cm = one("ConfigMap", f"{fullname}-client-ca")
                check(cm["data"]["ca.crt"].strip() == base64.b64decode(client_ca).decode().strip(), "client CA content")
                check(ca_vol.get("configMap", {}).get("name") == f"{fullname}-client-ca", f"client CA volume {ca_vol}")
            else:
                kind, name, key = client_ca_from.split(":")
                src = ca_vol.get(kind, {})
                check(src.get("name" if kind == "configMap" else "secretName") == name
                      and src.get("items") == [{"key": key, "path": "ca.crt"}], f"client CA volume {ca_vol}")
                check(not any(o["metadata"]["name"] == f"{fullname}-client-ca" for o in by_kind.get("ConfigMap", [])),
                      "no chart ConfigMap for an existing CA source")
            check("subPath" not in mounts["client-ca"], "client CA mounted as a directory (no subPath) so updates reach the server")
            check(env["CONFIGHISTORY_CLIENT_CA"]["value"] == mounts["client-ca"]["mountPath"] + "/ca.crt",
                  "CONFIGHISTORY_CLIENT_CA points into the client-ca mount")
            check(env.get("CONFIGHISTORY_CLIENT_NAMES", {}).get("value") == exp.get("clientnames"),
                  f"CONFIGHISTORY_CLIENT_NAMES={env.get('CONFIGHISTORY_CLIENT_NAMES')}, want {exp.get('clientnames')!r}")
            # Probes go to the plain-HTTP health port, which asks for no certificate.
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            for probe in ("livenessProbe", "readinessProbe"):
                get = c[probe].get("httpGet", {})
                check(get.get("port") in ("health", ports["health"]) and get.get("scheme", "HTTP") == "HTTP",
                      f"{probe} uses the plain health port: {c[probe]}")
            print(f"    mtls: client CA mounted, names pinned to {exp.get('clientnames')}, probes on the health port")
        else:
            check("CONFIGHISTORY_CLIENT_CA" not in env and "CONFIGHISTORY_CLIENT_NAMES" not in env,
                  "no client CA unless clientAuth")
        if tls != "server":
            vol = next(v for v in pod["volumes"] if v["name"] == "tls")
            secret = exp.get("secret", f"{fullname}-tls")
            check(vol["secret"]["secretName"] == secret, f"TLS volume secret {vol['secret']}")
            check(vol["secret"].get("defaultMode") == 0o440, f"TLS key must not be world-readable: {vol['secret']}")
        check(pod["securityContext"].get("fsGroup") == pod["securityContext"].get("runAsGroup"),
              "fsGroup must be the server's group, which reads the 0440 key")
        svc = one("Service", fullname)
        check({(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
              == {("https", 443, "https"), ("metrics", 8080, "health")}, "Service ports")
        if "NetworkPolicy" in by_kind:
            # docs/behaviour.md §9a: ingress only to the two ports; the admission port from the API
            # server's CIDRs when given, the metrics port from the monitoring namespaces.
            np = one("NetworkPolicy", fullname)["spec"]
            check(np["podSelector"] == {"matchLabels": dep["spec"]["selector"]["matchLabels"]},
                  f"NetworkPolicy podSelector {np['podSelector']}")
            check(np["policyTypes"] == ["Ingress"] and len(np["ingress"]) == 2, f"NetworkPolicy {np}")
            https, health = np["ingress"]
            check(https["ports"] == [{"port": "https", "protocol": "TCP"}], f"admission rule {https}")
            cidrs = [c for c in exp.get("apiservercidrs", "").split(",") if c]
            peers = int(exp.get("apiserverpeers", "0"))
            sources = https.get("from", [])
            check(sources[:len(cidrs)] == [{"ipBlock": {"cidr": c}} for c in cidrs] and len(sources) == len(cidrs) + peers,
                  f"admission port sources {sources} != {cidrs} and {peers} peers")
            check(all(p and set(p) <= {"ipBlock", "namespaceSelector", "podSelector"} for p in sources[len(cidrs):]),
                  f"admission port peers {sources[len(cidrs):]}")
            check(health["ports"] == [{"port": "health", "protocol": "TCP"}]
                  and len(health["from"]) == 1 and "namespaceSelector" in health["from"][0],
                  f"metrics rule {health}")
            want_pod = {"matchLabels": dict([exp["metricspod"].split("=", 1)])} if exp.get("metricspod") else None
            check(health["from"][0].get("podSelector") == want_pod, f"metrics rule podSelector {health['from'][0]}")
            print(f"    networkpolicy: admission port from {cidrs or 'anywhere'}, metrics from "
                  f"{health['from'][0]['namespaceSelector']}")
        if "PodDisruptionBudget" in by_kind:
            pdb = one("PodDisruptionBudget", fullname)
            want_api = "policy/v1" if kube >= (1, 21, 0) else "policy/v1beta1"
            check(pdb["apiVersion"] == want_api, f"PDB apiVersion {pdb['apiVersion']} for kube {exp['kube']}")
        if tls.startswith("certManager"):
            cert = one("Certificate", f"{fullname}-tls")
            names = cert["spec"]["dnsNames"]
            check(f"{fullname}.{ns}.svc" in names, f"Certificate dnsNames {names}")
            check(cert["spec"]["secretName"] == f"{fullname}-tls", "Certificate secretName")
            issuer = cert["spec"]["issuerRef"]
            if tls == "certManager":
                check(issuer == {"name": f"{fullname}-ca", "kind": "Issuer", "group": "cert-manager.io"},
                      f"issuerRef {issuer}")
                ca = one("Certificate", f"{fullname}-ca")
                check(ca["spec"]["isCA"] is True, "CA Certificate isCA")
                check(one("Issuer", f"{fullname}-ca")["spec"] == {"ca": {"secretName": f"{fullname}-ca"}},
                      "CA Issuer")
            else:
                check(issuer["name"] == exp["issuer"], f"issuerRef {issuer}")
        print(f"    workload: Deployment (hardened, probes on health), Service 443->https, "
              f"{'PDB ' + by_kind['PodDisruptionBudget'][0]['apiVersion'] if 'PodDisruptionBudget' in by_kind else 'no PDB'}"
              f"{', Certificate ' + tls if tls.startswith('certManager') else ''}")

    if hook:
        job = one("Job", f"{fullname}-namespace-label")
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        check(args == ["label", "namespace", ns, "confighistory.io/exclude=true", "--overwrite"],
              f"namespace label hook args {args}")
        hook_cr = one("ClusterRole", f"{fullname}-namespace-label")
        check(hook_cr["rules"] == [{"apiGroups": [""], "resources": ["namespaces"],
                                    "resourceNames": [ns], "verbs": ["get", "patch"]}],
              f"hook ClusterRole {hook_cr['rules']}")
        if deployment:
            selector = one("Service", fullname)["spec"]["selector"]
            pod_labels = job["spec"]["template"]["metadata"]["labels"]
            check(not all(pod_labels.get(k) == v for k, v in selector.items()),
                  "the hook pod matches the server's Service/PDB selector")
        print(f"    namespace-label hook: labels {ns} confighistory.io/exclude=true (kube < 1.21)")


if __name__ == "__main__":
    main()
