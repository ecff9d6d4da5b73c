//! Integration tests of Kubernetes mode `kubeadm`: the example pair plans offline
//! with every kubeadm resource, in graph order, and no secret reaches the plan, its
//! JSON or the rendered tree.

use std::path::PathBuf;
use std::process::Command;

const BLUEPRINT: &str = "blueprints/h100-kubeadm.yaml";
const INVENTORY: &str = "inventories/h100-kubeadm.yaml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toolkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolkit")).args(args).current_dir(root()).output().expect("runs toolkit")
}

#[test]
fn the_example_plans_the_kubeadm_bootstrap_in_graph_order() {
    let output = toolkit(&["plan", BLUEPRINT, "-i", INVENTORY, "--offline"]);
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    let line = |needle: &str| {
        text.lines().position(|line| line.contains(needle)).unwrap_or_else(|| panic!("no `{needle}` in\n{text}"))
    };
    let order = [
        "load overlay and br_netfilter",
        "apply Kubernetes' sysctls",
        "turn swap off",
        "file /etc/containerd/config.toml on ctl01,dgx[01-04]",
        "install kubelet, kubeadm and kubectl at 1.33.4-*",
        "file /etc/kubernetes/pki/ca.crt on ctl01",
        "(kubeadm init) on ctl01",
        "create the bootstrap token the joins use",
        "(kubeadm join) on dgx[01-04]",
    ];
    let positions: Vec<usize> = order.iter().map(|needle| line(needle)).collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{order:?} at {positions:?}\n{text}");
}

#[test]
fn no_secret_reaches_the_plan_or_the_rendered_tree() {
    let token = std::fs::read_to_string(root().join("inventories/h100-kubeadm/bootstrap-token")).expect("token");
    let token = token.trim();
    let key = std::fs::read_to_string(root().join("inventories/h100-kubeadm/ca.key")).expect("key");
    let key_line = key.lines().find(|line| line.len() > 40 && !line.contains(' ')).expect("a base64 line of the key");
    let out = tempfile::tempdir().expect("tempdir");
    let out_arg = out.path().to_str().expect("utf8");
    for args in [
        vec!["plan", BLUEPRINT, "-i", INVENTORY, "--offline"],
        vec!["plan", BLUEPRINT, "-i", INVENTORY, "--offline", "--output", "json"],
        vec!["plan", BLUEPRINT, "-i", INVENTORY, "--offline", "--out", out_arg],
    ] {
        let output = toolkit(&args);
        for stream in [&output.stdout, &output.stderr] {
            let text = String::from_utf8_lossy(stream);
            assert!(!text.contains(token) && !text.contains(key_line), "{args:?}");
        }
    }
    let mut files = vec![out.path().to_path_buf()];
    let mut seen = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).expect("reads").map(|entry| entry.expect("entry").path()));
        } else {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(!text.contains(token) && !text.contains(key_line), "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen > 10, "the rendered tree has files");
    assert!(out.path().join("dgx01/etc/containerd/config.toml").exists());
    assert!(!out.path().join("dgx01/etc/kubernetes/toolkit/kubeadm-join.yaml").exists(), "a secret file was written");
}

/// The whole example compiles with its inventory (the CA fixture and the test-only
/// token): the graph accepts every cross-host edge and orders init → token → joins.
#[test]
fn the_example_plans_in_graph_order() {
    let blueprint = toolkit::blueprint::load::load(&root().join(BLUEPRINT)).expect("loads");
    let inventory = toolkit::inventory::load(&root().join("inventories/h100-kubeadm.yaml")).expect("loads");
    // The inventory's paths are relative to where toolkit runs: the crate root.
    assert_eq!(std::env::current_dir().expect("cwd"), root());
    let compiled = toolkit::compile::compile(
        &blueprint,
        Some(&inventory),
        &toolkit::render::Renderer::embedded().expect("templates"),
    )
    .expect("compiles");
    let graph = &compiled.graph;
    let position = |id: &str| {
        let index = graph.resources.iter().position(|r| r.id.as_str() == id).unwrap_or_else(|| panic!("{id}"));
        graph.ordered().position(|i| i == index).expect("ordered")
    };
    let init = position("ctl01:command:kubeadm-init");
    let token = position("ctl01:command:kubeadm-token");
    assert!(position("ctl01:command:kubernetes-packages") < init);
    assert!(position("ctl01:service:containerd") < init);
    assert!(init < token);
    for worker in ["dgx01", "dgx04"] {
        assert!(token < position(&format!("{worker}:command:kubeadm-join")));
        assert!(
            position(&format!("{worker}:package:nvidia-container-toolkit"))
                < position(&format!("{worker}:service:containerd"))
        );
    }
    // helm on the control plane talks to the cluster kubeadm made, through its admin kubeconfig.
    for release in ["gpu-operator", "network-operator"] {
        let id = format!("ctl01:command:helm-{release}");
        assert!(init < position(&id), "{id}");
        let resource = graph.resources.iter().find(|r| r.id.as_str() == id).expect("helm");
        let toolkit::resource::Desired::Command { argv, .. } = &*resource.desired else { panic!("a command") };
        assert!(argv.ends_with(&["--kubeconfig".to_owned(), "/etc/kubernetes/admin.conf".to_owned()]), "{argv:?}");
    }
}

/// Before `kubeadm init` there is no admin kubeconfig: the API stage says what the
/// Kubernetes objects wait for instead of stopping the deploy that would make it.
#[test]
fn the_api_stage_waits_for_the_clusters_kubeconfig() {
    let output = toolkit(&["plan", BLUEPRINT, "-i", INVENTORY, "--stage", "api"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Kubernetes objects wait for the kubeadm cluster"), "{stderr}");
    assert!(stderr.contains("ctl01:/etc/kubernetes/admin.conf"), "{stderr}");
}
