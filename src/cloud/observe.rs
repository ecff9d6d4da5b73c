//! Reads a cluster's cloud objects as they are: its instances and placement groups.
//!
//! Stage: observe (API targets). Input: [`ApiDesired`] items and an [`Ec2`] client.
//! Output: [`Observed`] values by resource id, in the short texts of
//! [`ApiDesired::value`](crate::resource::api::ApiDesired), which `plan::api::diff`
//! turns into changes.

use super::{CLUSTER_TAG, CloudError, Ec2, NODE_TAG};
use crate::resource::api::{ApiDesired, Observed};

/// Reads `cluster`'s instances for the desired instance items of that cluster.
///
/// # Errors
/// See [`CloudError`].
pub async fn observe_cloud(ec2: &Ec2, cluster: &str, desired: &[ApiDesired]) -> Result<Observed, CloudError> {
    let instances = ec2.cluster_instances(cluster).await?;
    let mut observed = Observed::new();
    for item in desired {
        if let ApiDesired::Instance { cluster: owner, node, .. } = item
            && owner == cluster
        {
            let found = instances.iter().find(|instance| {
                instance.tag(CLUSTER_TAG) == Some(cluster) && instance.tag(NODE_TAG) == Some(node.as_str())
            });
            observed
                .insert(item.id(), found.map(|instance| format!("{} {}", instance.instance_type, instance.image_id)));
        }
        if let ApiDesired::PlacementGroup { name, .. } = item {
            let exists = ec2.placement_group_exists(name).await?;
            observed.insert(item.id(), exists.then(|| "cluster".to_owned()));
        }
    }
    Ok(observed)
}
