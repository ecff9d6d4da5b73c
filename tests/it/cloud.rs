//! Integration tests: EC2 through the Query API against moto's server mode
//! (`moto_server`, from `tests/support/requirements-http.txt`), started per test.
//!
//! moto does not check signatures by default. These tests turn its IAM
//! authentication on (`/moto-api/reset-auth`) after creating a user, an access key and
//! a policy, so every EC2 call below is signed with that key and verified by moto
//! (botocore's SigV4 implementation recomputes the signature); a wrong secret is refused.
//! moto 5.2.5 does not implement `CreatePlacementGroup` (it answers HTTP 500) and keys
//! interfaces by device index only, so the placement group and network card indices
//! are covered by the unit tests of the request parameters.

use serde_json::json;
use toolkit::cloud::observe::observe_cloud;
use toolkit::cloud::{
    AwsCredentials, CLUSTER_TAG, ClusterSpec, Ec2, Filter, NODE_TAG, NodeSpec, QueryClient, RailInterface,
    instance_hosts,
};
use toolkit::plan::Action;
use toolkit::plan::api::diff;
use toolkit::resource::api::ApiDesired;

use crate::redfish::{Server, free_port, venv_program};

const REGION: &str = "us-east-1";
const IMAGE: &str = "ami-12345678";

fn moto() -> Option<Server> {
    let program = venv_program("moto_server")?;
    let port = free_port();
    let args = ["-H".to_owned(), "127.0.0.1".to_owned(), "-p".to_owned(), port.to_string()];
    Some(Server::start(&program, &args, port, tempfile::tempdir().expect("tempdir")))
}

fn endpoint(server: &Server) -> String {
    format!("http://127.0.0.1:{}/", server.port)
}

/// Every `<tag>value</tag>` in `xml`, in order.
fn values(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split(&open).skip(1).filter_map(|rest| rest.split_once(&close).map(|(value, _)| value.to_owned())).collect()
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect()
}

/// Creates an IAM user allowed `ec2:*` with an access key, then makes moto verify
/// signatures from here on. Returns the key.
async fn enable_signature_checks(server: &Server) -> AwsCredentials {
    // Unchecked until reset-auth below: any key signs these.
    let bootstrap = AwsCredentials::new("AKIDBOOTSTRAP0000000", "bootstrap-secret");
    let iam = QueryClient::new(&endpoint(server), REGION, "iam", "2010-05-08", bootstrap).expect("client");
    iam.call("CreateUser", &params(&[("UserName", "toolkit")])).await.expect("creates the user");
    let key = iam.call("CreateAccessKey", &params(&[("UserName", "toolkit")])).await.expect("creates a key");
    let policy =
        json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["ec2:*"], "Resource": "*"}]});
    iam.call(
        "PutUserPolicy",
        &params(&[("UserName", "toolkit"), ("PolicyName", "ec2"), ("PolicyDocument", &policy.to_string())]),
    )
    .await
    .expect("attaches the policy");
    let response = reqwest::Client::new()
        .post(format!("{}moto-api/reset-auth", endpoint(server)))
        .body("0")
        .send()
        .await
        .expect("reset-auth");
    assert!(response.status().is_success(), "reset-auth: {}", response.status());
    AwsCredentials::new(&values(&key, "AccessKeyId")[0], &values(&key, "SecretAccessKey")[0])
}

#[tokio::test]
async fn moto_verifies_our_signatures() {
    let Some(server) = moto() else { return };
    let credentials = enable_signature_checks(&server).await;
    let good = Ec2::new(&endpoint(&server), REGION, credentials.clone()).expect("client");
    good.describe_instances(&[]).await.expect("a correctly signed call is accepted");

    let forged_secret = "not-the-secret-key-at-all-0000000000000";
    let forged = AwsCredentials::new(&credentials.access_key_id, forged_secret);
    let bad = Ec2::new(&endpoint(&server), REGION, forged).expect("client");
    let error = bad.describe_instances(&[]).await.expect_err("a wrong signature is refused");
    assert_eq!(error.code(), Some("AuthFailure"), "{error}");
    assert!(!format!("{error} {error:?}").contains(forged_secret));
}

#[tokio::test]
async fn runs_a_tagged_cluster_with_rail_interfaces_and_terminates_only_it() {
    let Some(server) = moto() else { return };
    let credentials = enable_signature_checks(&server).await;
    let ec2 = Ec2::new(&endpoint(&server), REGION, credentials).expect("client");
    let query = ec2.query();

    // One subnet per rail, in one availability zone as EFA rails must be.
    let vpc = query.call("CreateVpc", &params(&[("CidrBlock", "10.0.0.0/16")])).await.expect("vpc");
    let vpc_id = values(&vpc, "vpcId").remove(0);
    let mut subnets = Vec::new();
    for cidr in ["10.0.0.0/24", "10.0.1.0/24"] {
        let subnet = query
            .call(
                "CreateSubnet",
                &params(&[("VpcId", &vpc_id), ("CidrBlock", cidr), ("AvailabilityZone", "us-east-1a")]),
            )
            .await
            .expect("subnet");
        subnets.push(values(&subnet, "subnetId").remove(0));
    }

    // Instances that are not this cluster's: one untagged, one of another cluster.
    let mut foreign = Vec::new();
    for tags in [vec![], vec![(CLUSTER_TAG, "other")]] {
        let mut request = params(&[
            ("ImageId", IMAGE),
            ("InstanceType", "t3.micro"),
            ("MinCount", "1"),
            ("MaxCount", "1"),
            ("SubnetId", &subnets[0]),
        ]);
        for (key, value) in tags {
            request.extend(params(&[
                ("TagSpecification.1.ResourceType", "instance"),
                ("TagSpecification.1.Tag.1.Key", key),
                ("TagSpecification.1.Tag.1.Value", value),
            ]));
        }
        let xml = query.call("RunInstances", &request).await.expect("foreign instance");
        foreign.push(values(&xml, "instanceId").remove(0));
    }

    let node = |name: &str| NodeSpec {
        name: name.to_owned(),
        image_id: IMAGE.to_owned(),
        instance_type: "p5.48xlarge".to_owned(),
        key_name: None,
        rails: RailInterface::per_device(&subnets, &[]),
    };
    let spec = ClusterSpec { name: "c1".to_owned(), placement_group: None, nodes: vec![node("gpu01"), node("gpu02")] };
    let instances = ec2.run_cluster(&spec).await.expect("runs the cluster");
    assert_eq!(instances.len(), 2);
    for (instance, name) in instances.iter().zip(["gpu01", "gpu02"]) {
        assert_eq!(instance.tag(CLUSTER_TAG), Some("c1"));
        assert_eq!(instance.tag(NODE_TAG), Some(name));
        let interfaces = instance.interfaces();
        let layout: Vec<(u32, Option<&str>)> = interfaces
            .iter()
            .map(|interface| (interface.attachment.device_index, interface.subnet_id.as_deref()))
            .collect();
        assert_eq!(layout, [(0, Some(subnets[0].as_str())), (1, Some(subnets[1].as_str()))], "one interface per rail");
    }

    // moto applies the tag filter itself (describe_instances does not filter again).
    let tagged = ec2.describe_instances(&[Filter::new("tag:toolkit:cluster", "c1")]).await.expect("describes");
    assert_eq!(tagged.len(), 2, "only this cluster's instances match");

    // Described by tag filter, and a rerun converges instead of doubling the cluster.
    let described = ec2.cluster_instances("c1").await.expect("describes");
    let mut ids: Vec<&str> = described.iter().map(|instance| instance.id.as_str()).collect();
    ids.sort_unstable();
    let mut created: Vec<&str> = instances.iter().map(|instance| instance.id.as_str()).collect();
    created.sort_unstable();
    assert_eq!(ids, created);
    let again = ec2.run_cluster(&spec).await.expect("reruns");
    assert_eq!(
        again.iter().map(|instance| instance.id.as_str()).collect::<Vec<_>>(),
        instances.iter().map(|i| i.id.as_str()).collect::<Vec<_>>()
    );

    // The instances are the inventory's hosts.
    let hosts = instance_hosts(&described, "no-management-subnet", &subnets);
    assert_eq!(hosts.keys().map(String::as_str).collect::<Vec<_>>(), ["gpu01", "gpu02"]);
    for instance in &described {
        let host = &hosts[instance.tag(NODE_TAG).expect("node tag")];
        assert_eq!(Some(&host.address), instance.private_ip_address.as_ref());
        assert!(host.address.starts_with("10.0.0."), "{}", host.address);
        assert_eq!(host.rail_macs.len(), 2);
    }

    // As plan changes: gpu01 stays, gpu02 goes, gpu03 comes.
    let want = |name: &str, present: bool| ApiDesired::Instance {
        cluster: "c1".to_owned(),
        node: name.to_owned(),
        instance_type: "p5.48xlarge".to_owned(),
        image_id: IMAGE.to_owned(),
        present,
        key_name: None,
        interfaces: Vec::new(),
        placement_group: None,
    };
    let desired = [want("gpu01", true), want("gpu02", false), want("gpu03", true)];
    let changes = diff(&desired, &observe_cloud(&ec2, "c1", &desired).await.expect("observes"));
    let actions: Vec<Action> = changes.iter().map(|change| change.action).collect();
    assert_eq!(actions, [Action::NoOp, Action::Remove, Action::Create]);

    // Termination takes this cluster's instances and nothing else.
    let mut terminated = ec2.terminate_cluster("c1").await.expect("terminates");
    terminated.sort();
    assert_eq!(terminated, created);
    assert!(ec2.cluster_instances("c1").await.expect("describes").is_empty());
    let everything = ec2.describe_instances(&[]).await.expect("describes all");
    for id in &foreign {
        let instance = everything.iter().find(|instance| &instance.id == id).expect("foreign instance listed");
        assert!(!instance.is_terminated(), "{id} was not ours and must survive: {}", instance.state.name);
    }
    assert_eq!(ec2.terminate_cluster("c1").await.expect("idempotent"), Vec::<String>::new());
}

/// A cluster of one head and two GPU nodes, every group in the cloud.
const CLOUD_BLUEPRINT: &str = r#"version: 1
cluster:
  name: cloudy
node_groups:
  - name: head
    count: 1
    hostname: head
    roles: [controller, database, login]
  - name: gpu
    count: 2
    hostname: "gpu{index:02}"
    roles: [compute]
    gpu: { model: h100, count: 2 }
    rail_nics: { count: 2, speed_gbps: 400, link_layer: ethernet }
fabric:
  compute:
    kind: roce
    rails: 2
    link_speed_gbps: 400
    switch: { model: frr-container, radix: 32 }
    oversubscription: "1:1"
    roce: { mode: lossless, pfc_priority: 3, ecn: true }
    addressing:
      rail_pool: 10.200.0.0/16
      loopback_pool: 10.255.0.0/24
  management:
    inband: { subnet: 10.10.0.0/24 }
scheduler:
  kind: slurm
  slurm:
    partitions:
      - { name: gpu, groups: [gpu], default: true }
"#;

const ACCESS_VARIABLE: &str = "TOOLKIT_TEST_CLOUD_ACCESS_KEY";
const SECRET_VARIABLE: &str = "TOOLKIT_TEST_CLOUD_SECRET_KEY";

fn cloud_inventory(endpoint: &str, management: &str, rails: &[String]) -> String {
    format!(
        "version: 1
defaults: {{ user: ubuntu }}
cloud:
  provider: aws
  region: {REGION}
  endpoint: {endpoint}
  access_key_id: {{ env: {ACCESS_VARIABLE} }}
  secret_access_key: {{ env: {SECRET_VARIABLE} }}
  image_id: {IMAGE}
  management_subnet: {management}
  rail_subnets: [{}]
  node_groups:
    head: {{ instance_type: m5.large }}
    gpu: {{ instance_type: p5.48xlarge }}
",
        rails.join(", ")
    )
}

/// Runs toolkit in `dir` with the cloud credentials in its environment.
fn toolkit_in(dir: &std::path::Path, credentials: &AwsCredentials, args: &[&str]) -> std::process::Output {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .current_dir(dir)
        .env(ACCESS_VARIABLE, &credentials.access_key_id)
        .env(SECRET_VARIABLE, credentials.secret_access_key.expose())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runs toolkit");
    let all = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!all.contains(credentials.secret_access_key.expose()), "the secret key leaked: {all}");
    output
}

fn text(output: &std::process::Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn plan_json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("plan JSON: {}", text(output)))
}

#[tokio::test]
async fn plan_deploy_api_stage_replan_ssh_inventory_and_destroy_against_moto() {
    let Some(server) = moto() else { return };
    let credentials = enable_signature_checks(&server).await;
    let ec2 = Ec2::new(&endpoint(&server), REGION, credentials.clone()).expect("client");
    let query = ec2.query();
    let vpc = query.call("CreateVpc", &params(&[("CidrBlock", "10.0.0.0/16")])).await.expect("vpc");
    let vpc_id = values(&vpc, "vpcId").remove(0);
    let mut subnets = Vec::new();
    for cidr in ["10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24"] {
        let subnet = query
            .call(
                "CreateSubnet",
                &params(&[("VpcId", &vpc_id), ("CidrBlock", cidr), ("AvailabilityZone", "us-east-1a")]),
            )
            .await
            .expect("subnet");
        subnets.push(values(&subnet, "subnetId").remove(0));
    }
    let (management, rails) = (subnets[0].clone(), subnets[1..].to_vec());
    // Another cluster's instance: destroy must leave it running.
    let foreign_spec = NodeSpec {
        name: "gpu01".to_owned(),
        image_id: IMAGE.to_owned(),
        instance_type: "t3.micro".to_owned(),
        key_name: None,
        rails: RailInterface::per_device(std::slice::from_ref(&management), &[]),
    };
    let foreign = ec2.run_node("someone-else", None, &foreign_spec).await.expect("foreign instance").id;

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bp.yaml"), CLOUD_BLUEPRINT).expect("blueprint");
    std::fs::write(dir.path().join("inv.yaml"), cloud_inventory(&endpoint(&server), &management, &rails))
        .expect("inventory");
    let run = |args: &[&str]| toolkit_in(dir.path(), &credentials, args);

    // 1. The plan shows three instances to create.
    let output = run(&["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--output", "json"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let plan = plan_json(&output);
    let creates: Vec<(&str, &str)> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter(|change| change["action"] == "create")
        .map(|change| (change["id"].as_str().expect("id"), change["after"].as_str().expect("after")))
        .collect();
    assert_eq!(
        creates,
        [
            ("head:instance:cloudy", "m5.large ami-12345678"),
            ("gpu01:instance:cloudy", "p5.48xlarge ami-12345678"),
            ("gpu02:instance:cloudy", "p5.48xlarge ami-12345678"),
        ]
    );
    // The full offline plan orders them before each host's SSH resources.
    let output = run(&["plan", "bp.yaml", "-i", "inv.yaml", "--offline", "--output", "json"]);
    let ids: Vec<String> = plan_json(&output)["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|change| change["id"].as_str().expect("id").to_owned())
        .collect();
    let first_gpu01 = ids.iter().position(|id| id.starts_with("gpu01:")).expect("gpu01 resources");
    assert_eq!(ids[first_gpu01], "gpu01:instance:cloudy", "the instance comes before gpu01's files");

    // 2. deploy --stage api runs them, tagged, one interface on the management subnet
    //    and one per rail.
    let output = run(&["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let instances = ec2.cluster_instances("cloudy").await.expect("describes");
    assert_eq!(instances.len(), 3);
    for instance in &instances {
        let node = instance.tag(NODE_TAG).expect("node tag");
        assert_eq!(instance.tag(CLUSTER_TAG), Some("cloudy"));
        assert_eq!(instance.state.name, "running", "{node}");
        let subnets_of: Vec<Option<&str>> =
            instance.interfaces().iter().map(|interface| interface.subnet_id.as_deref()).collect();
        let mut expected = vec![Some(management.as_str())];
        if node != "head" {
            expected.extend(rails.iter().map(|rail| Some(rail.as_str())));
        }
        assert_eq!(subnets_of, expected, "{node}: management interface, then one per rail");
    }

    // 3. Planned again: nothing to change.
    let output = run(&["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("No changes."), "{}", text(&output));

    // 4. The SSH stage connects to each instance's management address.
    let inventory = toolkit::inventory::load(&dir.path().join("inv.yaml")).expect("inventory with cloud hosts");
    let local = toolkit::transport::targets::LocalUser { name: "tester".to_owned(), home: dir.path().to_path_buf() };
    let targets = toolkit::transport::targets::from_inventory(&inventory.inventory, &local).expect("targets");
    let mut reached: Vec<(String, String, String)> =
        targets.into_iter().map(|target| (target.host, target.address, target.user)).collect();
    reached.sort();
    let mut expected: Vec<(String, String, String)> = instances
        .iter()
        .map(|instance| {
            let address = instance.interfaces()[0].private_ip_address.clone().expect("management address");
            (instance.tag(NODE_TAG).expect("node").to_owned(), address, "ubuntu".to_owned())
        })
        .collect();
    expected.sort();
    assert_eq!(reached, expected);
    let gpu01 = &inventory.inventory.hosts["gpu01"];
    assert_eq!(gpu01.rail_macs.len(), 2, "rail MACs by rail subnet");

    // A node leaves the blueprint: its instance is planned for removal, terminated,
    // and its host leaves the SSH stage's inventory.
    std::fs::write(dir.path().join("bp.yaml"), CLOUD_BLUEPRINT.replace("    count: 2\n", "    count: 1\n"))
        .expect("blueprint");
    let output = run(&["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("- instance cloudy on gpu02"), "{}", text(&output));
    let output = run(&["deploy", "bp.yaml", "-i", "inv.yaml", "--stage", "api", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let nodes: Vec<String> = ec2
        .cluster_instances("cloudy")
        .await
        .expect("describes")
        .iter()
        .filter_map(|instance| instance.tag(NODE_TAG).map(str::to_owned))
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert!(!nodes.contains(&"gpu02".to_owned()), "{nodes:?}");
    let output = run(&["plan", "bp.yaml", "-i", "inv.yaml", "--stage", "api"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let inventory = toolkit::inventory::load(&dir.path().join("inv.yaml")).expect("inventory");
    assert!(!inventory.inventory.hosts.contains_key("gpu02"));

    // 5. destroy: refused off a terminal without --yes, then terminates this cluster's
    //    instances and nothing else; a second destroy has nothing to do.
    let output = run(&["destroy", "bp.yaml", "-i", "inv.yaml"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert_eq!(ec2.cluster_instances("cloudy").await.expect("describes").len(), 2, "nothing terminated");
    let output = run(&["destroy", "bp.yaml", "-i", "inv.yaml", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("2 instance(s) terminated"), "{}", text(&output));
    assert!(ec2.cluster_instances("cloudy").await.expect("describes").is_empty());
    let survivor = ec2.describe_instances(&[Filter::new("instance-id", &foreign)]).await.expect("describes");
    assert_eq!(survivor[0].state.name, "running", "another cluster's instance survives");
    assert!(!dir.path().join("inv.cloud-hosts.yaml").exists(), "the cloud hosts are forgotten");
    let output = run(&["destroy", "bp.yaml", "-i", "inv.yaml", "--yes"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("No cloud instances"), "{}", text(&output));
}

#[test]
fn cloud_mistakes_are_reported_with_their_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bp.yaml"), CLOUD_BLUEPRINT).expect("blueprint");
    let inventory = cloud_inventory("http://127.0.0.1:1/", "subnet-m", &["subnet-a".to_owned()])
        .replace(&format!("  region: {REGION}\n"), "")
        .replace("    gpu: {", "    gpus: { instance_type: p5.48xlarge }\n    gpu: {");
    std::fs::write(dir.path().join("inv.yaml"), &inventory).expect("inventory");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolkit"))
        .args(["lint", "bp.yaml", "-i", "inv.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = |needle: &str| inventory.lines().position(|line| line.contains(needle)).expect("line") + 1;
    for (id, at) in [
        ("cloud-missing-region", format!("inv.yaml:{}:", line("cloud:"))),
        ("cloud-rail-subnets", format!("inv.yaml:{}:", line("rail_subnets:"))),
        ("cloud-unknown-node-group", format!("inv.yaml:{}:", line("gpus:"))),
    ] {
        let block = stderr
            .split("\n\n")
            .find(|block| block.contains(&format!("[{id}]")))
            .unwrap_or_else(|| panic!("{id} in:\n{stderr}"));
        assert!(block.contains(&at), "{id} at {at}:\n{block}");
    }
}
