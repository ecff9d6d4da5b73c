//! EC2 for GPU clusters: a cluster placement group, one instance per node with one
//! network interface per rail, ownership tags, describe and terminate by tag.
//!
//! Stage: apply (cloud). Input: a [`ClusterSpec`]. Output: [`Instance`]s, and the
//! inventory they make ([`instance_hosts`]). Every instance and interface is
//! tagged `toolkit:cluster=<cluster>` and `toolkit:node=<host>`; termination acts only
//! on instances that carry this cluster's tag, checked again on the answer itself so
//! that a filter the service ignored cannot widen it.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::CloudError;
use super::query::QueryClient;
use super::sigv4::AwsCredentials;
use crate::inventory::schema::Host;
use crate::resource::api::ApiDesired;
// The interface type is part of a desired instance, so it lives with the core's API objects.
pub use crate::resource::api::RailInterface;

/// Tag naming the cluster that owns a resource.
pub const CLUSTER_TAG: &str = "toolkit:cluster";
/// Tag naming the node (inventory host) an instance is.
pub const NODE_TAG: &str = "toolkit:node";
/// The EC2 Query API version.
pub const EC2_API_VERSION: &str = "2016-11-15";

impl RailInterface {
    /// One interface per rail on multi-card instances: rail `r` on network card `r`;
    /// the primary interface (rail 0) is device 0, every other is device 1 on its
    /// own card (AWS's layout for p4d/p5 EFA rails).
    #[must_use]
    pub fn per_card(subnets: &[String], security_group_ids: &[String], interface_type: Option<&str>) -> Vec<Self> {
        subnets
            .iter()
            .enumerate()
            .map(|(rail, subnet)| Self {
                subnet_id: subnet.clone(),
                network_card_index: rail as u32,
                device_index: u32::from(rail > 0),
                security_group_ids: security_group_ids.to_vec(),
                interface_type: interface_type.map(str::to_owned),
            })
            .collect()
    }

    /// One interface per rail on a single-card instance: rail `r` is device `r`.
    #[must_use]
    pub fn per_device(subnets: &[String], security_group_ids: &[String]) -> Vec<Self> {
        subnets
            .iter()
            .enumerate()
            .map(|(rail, subnet)| Self {
                subnet_id: subnet.clone(),
                network_card_index: 0,
                device_index: rail as u32,
                security_group_ids: security_group_ids.to_vec(),
                interface_type: None,
            })
            .collect()
    }
}

/// One node to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Host name: the `toolkit:node` tag and the inventory key.
    pub name: String,
    /// AMI.
    pub image_id: String,
    /// Instance type (`p5.48xlarge`).
    pub instance_type: String,
    /// SSH key pair name.
    pub key_name: Option<String>,
    /// Interfaces, rail 0 first.
    pub rails: Vec<RailInterface>,
}

impl NodeSpec {
    /// What `RunInstances` needs for a desired instance; `None` for any other item.
    #[must_use]
    pub fn from_desired(item: &ApiDesired) -> Option<Self> {
        match item {
            ApiDesired::Instance { node, instance_type, image_id, key_name, interfaces, .. } => Some(Self {
                name: node.clone(),
                image_id: image_id.clone(),
                instance_type: instance_type.clone(),
                key_name: key_name.clone(),
                rails: interfaces.clone(),
            }),
            _ => None,
        }
    }
}

/// A cluster of nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Cluster name: the `toolkit:cluster` tag.
    pub name: String,
    /// Cluster placement group for all nodes (created when missing).
    pub placement_group: Option<String>,
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
}

/// A tag.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Tag {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
struct TagSet {
    #[serde(rename = "item", default)]
    items: Vec<Tag>,
}

/// An instance's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct InstanceState {
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping`, `stopped`.
    #[serde(default)]
    pub name: String,
}

/// Where an instance is placed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Placement {
    /// Availability zone.
    #[serde(rename = "availabilityZone", default)]
    pub availability_zone: Option<String>,
    /// Placement group.
    #[serde(rename = "groupName", default)]
    pub group_name: Option<String>,
}

/// How an interface is attached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    /// Device index.
    #[serde(rename = "deviceIndex", default)]
    pub device_index: u32,
    /// Network card index.
    #[serde(rename = "networkCardIndex", default)]
    pub network_card_index: u32,
}

/// An instance's network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NetworkInterface {
    /// `eni-…`.
    #[serde(rename = "networkInterfaceId", default)]
    pub id: String,
    /// Subnet.
    #[serde(rename = "subnetId", default)]
    pub subnet_id: Option<String>,
    /// MAC address.
    #[serde(rename = "macAddress", default)]
    pub mac_address: Option<String>,
    /// Primary private IP.
    #[serde(rename = "privateIpAddress", default)]
    pub private_ip_address: Option<String>,
    /// Attachment.
    #[serde(default)]
    pub attachment: Attachment,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
struct InterfaceSet {
    #[serde(rename = "item", default)]
    items: Vec<NetworkInterface>,
}

/// An EC2 instance as `RunInstances`/`DescribeInstances` report it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Instance {
    /// `i-…`.
    #[serde(rename = "instanceId")]
    pub id: String,
    /// Instance type.
    #[serde(rename = "instanceType", default)]
    pub instance_type: String,
    /// AMI.
    #[serde(rename = "imageId", default)]
    pub image_id: String,
    /// State.
    #[serde(rename = "instanceState", default)]
    pub state: InstanceState,
    /// Primary private IP.
    #[serde(rename = "privateIpAddress", default)]
    pub private_ip_address: Option<String>,
    /// Placement.
    #[serde(default)]
    pub placement: Placement,
    #[serde(rename = "tagSet", default)]
    tag_set: TagSet,
    #[serde(rename = "networkInterfaceSet", default)]
    interface_set: InterfaceSet,
}

impl Instance {
    /// The value of tag `key`.
    #[must_use]
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tag_set.items.iter().find(|tag| tag.key == key).map(|tag| tag.value.as_str())
    }

    /// All tags.
    #[must_use]
    pub fn tags(&self) -> &[Tag] {
        &self.tag_set.items
    }

    /// Network interfaces in rail order: by network card, then device index.
    #[must_use]
    pub fn interfaces(&self) -> Vec<&NetworkInterface> {
        let mut interfaces: Vec<&NetworkInterface> = self.interface_set.items.iter().collect();
        interfaces
            .sort_by_key(|interface| (interface.attachment.network_card_index, interface.attachment.device_index));
        interfaces
    }

    /// Whether it is gone or going.
    #[must_use]
    pub fn is_terminated(&self) -> bool {
        matches!(self.state.name.as_str(), "shutting-down" | "terminated")
    }
}

#[derive(Debug, Default, Deserialize)]
struct PlacementGroupItem {
    #[serde(rename = "groupName", default)]
    name: String,
    #[serde(default)]
    state: String,
}

#[derive(Debug, Default, Deserialize)]
struct PlacementGroupSet {
    #[serde(rename = "item", default)]
    items: Vec<PlacementGroupItem>,
}

#[derive(Debug, Deserialize)]
struct DescribePlacementGroupsResponse {
    #[serde(rename = "placementGroupSet", default)]
    groups: PlacementGroupSet,
}

#[derive(Debug, Default, Deserialize)]
struct InstanceSet {
    #[serde(rename = "item", default)]
    items: Vec<Instance>,
}

#[derive(Debug, Deserialize)]
struct RunInstancesResponse {
    #[serde(rename = "instancesSet", default)]
    instances: InstanceSet,
}

#[derive(Debug, Deserialize)]
struct Reservation {
    #[serde(rename = "instancesSet", default)]
    instances: InstanceSet,
}

#[derive(Debug, Default, Deserialize)]
struct ReservationSet {
    #[serde(rename = "item", default)]
    items: Vec<Reservation>,
}

#[derive(Debug, Deserialize)]
struct DescribeInstancesResponse {
    #[serde(rename = "reservationSet", default)]
    reservations: ReservationSet,
    #[serde(rename = "nextToken", default)]
    next_token: Option<String>,
}

/// A filter of `Describe*` calls (`tag:toolkit:cluster` = `[name]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Filter name.
    pub name: String,
    /// Accepted values.
    pub values: Vec<String>,
}

impl Filter {
    /// A filter on one value.
    #[must_use]
    pub fn new(name: &str, value: &str) -> Self {
        Self { name: name.to_owned(), values: vec![value.to_owned()] }
    }
}

/// The EC2 Query API, signed.
#[derive(Debug, Clone)]
pub struct Ec2 {
    query: QueryClient,
}

impl Ec2 {
    /// EC2 at `endpoint` (AWS's regional endpoint, or a test server) in `region`.
    ///
    /// # Errors
    /// A bad endpoint.
    pub fn new(endpoint: &str, region: &str, credentials: AwsCredentials) -> Result<Self, CloudError> {
        Ok(Self { query: QueryClient::new(endpoint, region, "ec2", EC2_API_VERSION, credentials)? })
    }

    /// EC2 at AWS's endpoint for `region`.
    ///
    /// # Errors
    /// A region that makes no valid host name.
    pub fn for_region(region: &str, credentials: AwsCredentials) -> Result<Self, CloudError> {
        Self::new(&format!("https://ec2.{region}.amazonaws.com/"), region, credentials)
    }

    /// The underlying Query client.
    #[must_use]
    pub fn query(&self) -> &QueryClient {
        &self.query
    }

    /// Creates a `cluster` placement group tagged with the cluster; `Ok(false)` when
    /// it already exists.
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn create_placement_group(&self, cluster: &str, name: &str) -> Result<bool, CloudError> {
        let mut params = vec![param("GroupName", name), param("Strategy", "cluster")];
        params.extend(tag_specification(1, "placement-group", cluster, None));
        match self.query.call("CreatePlacementGroup", &params).await {
            Ok(_) => Ok(true),
            Err(error) if error.code() == Some("InvalidPlacementGroup.Duplicate") => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Runs one node: tagged instance and interfaces, one interface per rail, in the
    /// placement group when given. A client token makes a retried call return the
    /// same instance instead of a second one.
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn run_node(
        &self,
        cluster: &str,
        placement_group: Option<&str>,
        node: &NodeSpec,
    ) -> Result<Instance, CloudError> {
        let params = run_instances_params(cluster, placement_group, node, &client_token(cluster, &node.name));
        let xml = self.query.call("RunInstances", &params).await?;
        let response: RunInstancesResponse = self.query.decode("RunInstances", &xml)?;
        response.instances.items.into_iter().next().ok_or_else(|| CloudError::Decode {
            service: "ec2".to_owned(),
            action: "RunInstances".to_owned(),
            reason: "no instance in the answer".to_owned(),
        })
    }

    /// The placement group (if any), then every node that is not already running
    /// with this cluster's tags (a rerun converges instead of doubling the cluster).
    ///
    /// # Errors
    /// See [`CloudError`]; nodes started before a failure keep running and are found
    /// by the next run.
    pub async fn run_cluster(&self, spec: &ClusterSpec) -> Result<Vec<Instance>, CloudError> {
        if let Some(group) = &spec.placement_group {
            self.create_placement_group(&spec.name, group).await?;
        }
        let existing = self.cluster_instances(&spec.name).await?;
        let mut instances = Vec::new();
        for node in &spec.nodes {
            if let Some(instance) = existing.iter().find(|instance| instance.tag(NODE_TAG) == Some(node.name.as_str()))
            {
                instances.push(instance.clone());
                continue;
            }
            tracing::info!(cluster = %spec.name, node = %node.name, "run instance");
            instances.push(self.run_node(&spec.name, spec.placement_group.as_deref(), node).await?);
        }
        Ok(instances)
    }

    /// Instances matching `filters`, every page.
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn describe_instances(&self, filters: &[Filter]) -> Result<Vec<Instance>, CloudError> {
        let mut instances = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = filter_params(filters);
            if let Some(token) = &token {
                params.push(param("NextToken", token));
            }
            let xml = self.query.call("DescribeInstances", &params).await?;
            let response: DescribeInstancesResponse = self.query.decode("DescribeInstances", &xml)?;
            instances
                .extend(response.reservations.items.into_iter().flat_map(|reservation| reservation.instances.items));
            match response.next_token.filter(|token| !token.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok(instances),
            }
        }
    }

    /// This cluster's instances that are not terminated or terminating.
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn cluster_instances(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        let filters = [
            Filter::new(&format!("tag:{CLUSTER_TAG}"), cluster),
            Filter {
                name: "instance-state-name".to_owned(),
                values: ["pending", "running", "stopping", "stopped"].map(str::to_owned).to_vec(),
            },
        ];
        let instances = self.describe_instances(&filters).await?;
        Ok(instances.into_iter().filter(|instance| owned_by(instance, cluster) && !instance.is_terminated()).collect())
    }

    /// Whether a placement group of this name exists (AWS answers an unknown name in
    /// a `group-name` filter with an empty set).
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn placement_group_exists(&self, name: &str) -> Result<bool, CloudError> {
        let params = filter_params(&[Filter::new("group-name", name)]);
        let xml = self.query.call("DescribePlacementGroups", &params).await?;
        let response: DescribePlacementGroupsResponse = self.query.decode("DescribePlacementGroups", &xml)?;
        Ok(response.groups.items.iter().any(|group| group.name == name && group.state != "deleted"))
    }

    /// Polls until every instance in `ids` is `running`, and returns them as then
    /// described (with their addresses).
    ///
    /// # Errors
    /// [`CloudError::Timeout`] after `timeout`, or see [`CloudError`].
    pub async fn wait_running(
        &self,
        ids: &[String],
        timeout: std::time::Duration,
        poll: std::time::Duration,
    ) -> Result<Vec<Instance>, CloudError> {
        let started = std::time::Instant::now();
        loop {
            let filters = [Filter { name: "instance-id".to_owned(), values: ids.to_vec() }];
            let instances = self.describe_instances(&filters).await?;
            let running = instances.iter().filter(|instance| instance.state.name == "running").count();
            if running == ids.len() {
                return Ok(instances);
            }
            if started.elapsed() >= timeout {
                return Err(CloudError::Timeout {
                    what: format!("{} of {} instance(s) running", running, ids.len()),
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Terminates this cluster's instances and only them; returns their ids.
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn terminate_cluster(&self, cluster: &str) -> Result<Vec<String>, CloudError> {
        let ids: Vec<String> = self.cluster_instances(cluster).await?.into_iter().map(|instance| instance.id).collect();
        if ids.is_empty() {
            return Ok(ids);
        }
        tracing::info!(cluster, count = ids.len(), "terminate instances");
        self.terminate_instances(&ids).await?;
        Ok(ids)
    }

    /// Terminates the instances `ids` (callers check ownership first).
    ///
    /// # Errors
    /// See [`CloudError`].
    pub async fn terminate_instances(&self, ids: &[String]) -> Result<(), CloudError> {
        let params: Vec<(String, String)> =
            ids.iter().enumerate().map(|(index, id)| param(&format!("InstanceId.{}", index + 1), id)).collect();
        self.query.call("TerminateInstances", &params).await.map(|_| ())
    }
}

fn owned_by(instance: &Instance, cluster: &str) -> bool {
    instance.tag(CLUSTER_TAG) == Some(cluster)
}

fn param(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

fn filter_params(filters: &[Filter]) -> Vec<(String, String)> {
    let mut params = Vec::new();
    for (index, filter) in filters.iter().enumerate() {
        let prefix = format!("Filter.{}", index + 1);
        params.push(param(&format!("{prefix}.Name"), &filter.name));
        for (value_index, value) in filter.values.iter().enumerate() {
            params.push(param(&format!("{prefix}.Value.{}", value_index + 1), value));
        }
    }
    params
}

fn tag_specification(index: usize, resource_type: &str, cluster: &str, node: Option<&str>) -> Vec<(String, String)> {
    let prefix = format!("TagSpecification.{index}");
    let mut params = vec![
        param(&format!("{prefix}.ResourceType"), resource_type),
        param(&format!("{prefix}.Tag.1.Key"), CLUSTER_TAG),
        param(&format!("{prefix}.Tag.1.Value"), cluster),
    ];
    if let Some(node) = node {
        params.push(param(&format!("{prefix}.Tag.2.Key"), NODE_TAG));
        params.push(param(&format!("{prefix}.Tag.2.Value"), node));
    }
    params
}

/// A token unique to this call (cluster, node, time): retries of the call reuse it,
/// a later run after a termination does not.
fn client_token(cluster: &str, node: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or_default();
    let digest = Sha256::digest(format!("{cluster}\0{node}\0{nanos}").as_bytes());
    format!("toolkit-{}", hex::encode(&digest[..16]))
}

/// The `RunInstances` parameters for one node.
fn run_instances_params(
    cluster: &str,
    placement_group: Option<&str>,
    node: &NodeSpec,
    token: &str,
) -> Vec<(String, String)> {
    let mut params = vec![
        param("ImageId", &node.image_id),
        param("InstanceType", &node.instance_type),
        param("MinCount", "1"),
        param("MaxCount", "1"),
        param("ClientToken", token),
    ];
    if let Some(key) = &node.key_name {
        params.push(param("KeyName", key));
    }
    if let Some(group) = placement_group {
        params.push(param("Placement.GroupName", group));
    }
    for (index, rail) in node.rails.iter().enumerate() {
        let prefix = format!("NetworkInterface.{}", index + 1);
        params.push(param(&format!("{prefix}.DeviceIndex"), &rail.device_index.to_string()));
        params.push(param(&format!("{prefix}.NetworkCardIndex"), &rail.network_card_index.to_string()));
        params.push(param(&format!("{prefix}.SubnetId"), &rail.subnet_id));
        params.push(param(&format!("{prefix}.DeleteOnTermination"), "true"));
        params.push(param(&format!("{prefix}.Description"), &format!("{cluster} {} rail {index}", node.name)));
        if let Some(kind) = &rail.interface_type {
            params.push(param(&format!("{prefix}.InterfaceType"), kind));
        }
        for (group_index, group) in rail.security_group_ids.iter().enumerate() {
            params.push(param(&format!("{prefix}.SecurityGroupId.{}", group_index + 1), group));
        }
    }
    params.extend(tag_specification(1, "instance", cluster, Some(&node.name)));
    params.extend(tag_specification(2, "network-interface", cluster, Some(&node.name)));
    params
}

/// The hosts of running instances, as the SSH stage reaches them: one per
/// `toolkit:node` tag, addressed by its interface in `management_subnet` (else its
/// primary private IP), rail MACs by the position of each interface's subnet in
/// `rail_subnets`. Instances without a node tag or an address (terminated ones) are
/// left out.
#[must_use]
pub fn instance_hosts(
    instances: &[Instance],
    management_subnet: &str,
    rail_subnets: &[String],
) -> BTreeMap<String, Host> {
    let mut hosts = BTreeMap::new();
    for instance in instances.iter().filter(|instance| !instance.is_terminated()) {
        let Some(node) = instance.tag(NODE_TAG) else { continue };
        let interfaces = instance.interfaces();
        let management = interfaces
            .iter()
            .find(|interface| interface.subnet_id.as_deref() == Some(management_subnet))
            .and_then(|interface| interface.private_ip_address.clone())
            .or_else(|| instance.private_ip_address.clone());
        let Some(address) = management else { continue };
        let rail_macs = interfaces
            .iter()
            .filter_map(|interface| {
                let rail = rail_subnets.iter().position(|subnet| Some(subnet) == interface.subnet_id.as_ref())?;
                Some((u32::try_from(rail).ok()?, interface.mac_address.clone()?))
            })
            .collect();
        hosts.insert(
            node.to_owned(),
            Host {
                address,
                port: None,
                user: None,
                sudo: None,
                identity_file: None,
                proxy_jump: None,
                rail_macs,
                boot_macs: Vec::new(),
                fake_gpu_devices: false,
                vars: BTreeMap::new(),
            },
        );
    }
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeSpec {
        NodeSpec {
            name: "gpu01".into(),
            image_id: "ami-12345678".into(),
            instance_type: "p5.48xlarge".into(),
            key_name: Some("ops".into()),
            rails: RailInterface::per_card(&["subnet-a".into(), "subnet-b".into()], &["sg-1".into()], Some("efa")),
        }
    }

    #[test]
    fn run_instances_has_rails_tags_and_placement() {
        let params: BTreeMap<String, String> =
            run_instances_params("c1", Some("c1-pg"), &node(), "tok").into_iter().collect();
        let get = |key: &str| params.get(key).map(String::as_str);
        assert_eq!(get("Placement.GroupName"), Some("c1-pg"));
        assert_eq!(get("NetworkInterface.1.DeviceIndex"), Some("0"));
        assert_eq!(get("NetworkInterface.1.NetworkCardIndex"), Some("0"));
        assert_eq!(get("NetworkInterface.2.DeviceIndex"), Some("1"));
        assert_eq!(get("NetworkInterface.2.NetworkCardIndex"), Some("1"));
        assert_eq!(get("NetworkInterface.2.SubnetId"), Some("subnet-b"));
        assert_eq!(get("NetworkInterface.2.InterfaceType"), Some("efa"));
        assert_eq!(get("NetworkInterface.2.SecurityGroupId.1"), Some("sg-1"));
        assert_eq!(get("TagSpecification.1.ResourceType"), Some("instance"));
        assert_eq!(get("TagSpecification.1.Tag.1.Key"), Some(CLUSTER_TAG));
        assert_eq!(get("TagSpecification.1.Tag.1.Value"), Some("c1"));
        assert_eq!(get("TagSpecification.1.Tag.2.Key"), Some(NODE_TAG));
        assert_eq!(get("TagSpecification.1.Tag.2.Value"), Some("gpu01"));
        assert_eq!(get("TagSpecification.2.ResourceType"), Some("network-interface"));
        assert_eq!(get("ClientToken"), Some("tok"));
        assert!(!params.contains_key("SubnetId"), "interfaces and an instance subnet exclude each other");
    }

    #[test]
    fn client_tokens_fit_ec2s_limit_and_differ() {
        let first = client_token("cluster", "node");
        assert!(first.len() <= 64 && first.is_ascii(), "{first}");
        assert_ne!(first, client_token("cluster", "node2"));
    }

    const DESCRIBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>r-1</requestId>
  <reservationSet>
    <item>
      <reservationId>r-0</reservationId>
      <instancesSet>
        <item>
          <instanceId>i-0a</instanceId>
          <imageId>ami-1</imageId>
          <instanceState><code>16</code><name>running</name></instanceState>
          <privateIpAddress>10.0.0.5</privateIpAddress>
          <instanceType>p5.48xlarge</instanceType>
          <placement><availabilityZone>us-east-1a</availabilityZone><groupName>pg</groupName></placement>
          <tagSet>
            <item><key>toolkit:cluster</key><value>c1</value></item>
            <item><key>toolkit:node</key><value>gpu01</value></item>
          </tagSet>
          <networkInterfaceSet>
            <item><networkInterfaceId>eni-2</networkInterfaceId><macAddress>02:00:00:00:00:02</macAddress><subnetId>subnet-r1</subnetId>
              <attachment><deviceIndex>1</deviceIndex><networkCardIndex>1</networkCardIndex></attachment></item>
            <item><networkInterfaceId>eni-1</networkInterfaceId><macAddress>02:00:00:00:00:01</macAddress><subnetId>subnet-r0</subnetId>
              <attachment><deviceIndex>0</deviceIndex><networkCardIndex>0</networkCardIndex></attachment></item>
          </networkInterfaceSet>
        </item>
        <item>
          <instanceId>i-0b</instanceId>
          <instanceState><code>48</code><name>terminated</name></instanceState>
          <tagSet><item><key>toolkit:node</key><value>gpu02</value></item></tagSet>
        </item>
      </instancesSet>
    </item>
  </reservationSet>
</DescribeInstancesResponse>"#;

    #[test]
    fn parses_describe_and_builds_the_inventory() {
        let response: DescribeInstancesResponse = quick_xml::de::from_str(DESCRIBE).expect("parses");
        let instances: Vec<Instance> =
            response.reservations.items.into_iter().flat_map(|reservation| reservation.instances.items).collect();
        assert_eq!(instances.len(), 2);
        assert_eq!(instances[0].tag(CLUSTER_TAG), Some("c1"));
        assert_eq!(instances[0].placement.group_name.as_deref(), Some("pg"));
        assert_eq!(instances[0].interfaces()[0].id, "eni-1");
        assert!(instances[1].is_terminated());
        let hosts = instance_hosts(&instances, "subnet-mgmt", &["subnet-r0".to_owned(), "subnet-r1".to_owned()]);
        assert_eq!(hosts.keys().collect::<Vec<_>>(), ["gpu01"]);
        let host = &hosts["gpu01"];
        assert_eq!(host.address, "10.0.0.5");
        assert_eq!(host.rail_macs.get(&0).map(String::as_str), Some("02:00:00:00:00:01"));
        assert_eq!(host.rail_macs.get(&1).map(String::as_str), Some("02:00:00:00:00:02"));
    }

    #[test]
    fn placement_groups_are_read_from_the_describe_answer() {
        // As AWS documents the DescribePlacementGroups response.
        let xml = r#"<DescribePlacementGroupsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>d4904fd9-82c2-4ea5-adfe-a9cc3EXAMPLE</requestId>
  <placementGroupSet>
    <item><groupName>gpu-pg</groupName><strategy>cluster</strategy><state>available</state></item>
    <item><groupName>old</groupName><strategy>cluster</strategy><state>deleted</state></item>
  </placementGroupSet>
</DescribePlacementGroupsResponse>"#;
        let response: DescribePlacementGroupsResponse = quick_xml::de::from_str(xml).expect("decodes");
        let names: Vec<(&str, &str)> =
            response.groups.items.iter().map(|group| (group.name.as_str(), group.state.as_str())).collect();
        assert_eq!(names, [("gpu-pg", "available"), ("old", "deleted")]);
        let empty: DescribePlacementGroupsResponse = quick_xml::de::from_str(
            "<DescribePlacementGroupsResponse><placementGroupSet/></DescribePlacementGroupsResponse>",
        )
        .expect("decodes an empty set");
        assert!(empty.groups.items.is_empty());
    }
}
