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
use toolkit::bmc::resources::{ApiDesired, diff, observe_cloud};
use toolkit::cloud::{
    AwsCredentials, CLUSTER_TAG, ClusterSpec, Ec2, Filter, NODE_TAG, NodeSpec, QueryClient, RailInterface,
    instances_to_inventory,
};
use toolkit::plan::Action;

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
    let inventory = instances_to_inventory(&described);
    assert_eq!(inventory.hosts.keys().map(String::as_str).collect::<Vec<_>>(), ["gpu01", "gpu02"]);
    for instance in &described {
        let host = &inventory.hosts[instance.tag(NODE_TAG).expect("node tag")];
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
