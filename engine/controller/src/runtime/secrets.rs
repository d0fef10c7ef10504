//! Notification secrets from the Kubernetes API: the controller's [`SecretResolver`]. It lives here rather
//! than in trainwarden-notify so that the notifier (and local mode, which uses it) does not link kube.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use trainwarden_core::SecretRef;
use trainwarden_notify::{SecretError, SecretFuture, SecretResolver, SecretValue};

/// Secrets from the Kubernetes API (`get` on `secrets` in the referenced namespace).
#[derive(Clone)]
pub struct KubeSecrets {
    client: kube::Client,
}

impl KubeSecrets {
    /// A resolver that reads Secrets with `client` (its service account needs `get` on `secrets`).
    pub fn new(client: kube::Client) -> Self {
        KubeSecrets { client }
    }

    async fn lookup(&self, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &reference.namespace);
        let secret = match api.get_opt(&reference.name).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(SecretError::NotFound {
                    reference: reference.to_string(),
                    detail: format!("no Secret {}/{}", reference.namespace, reference.name),
                });
            }
            // kube's errors carry the API status (reason, request path), never a Secret's data.
            Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
                return Err(SecretError::Forbidden {
                    reference: reference.to_string(),
                    detail: format!("{} ({}); check the controller's RBAC", status.message, status.code),
                });
            }
            Err(e) => {
                return Err(SecretError::Unavailable {
                    reference: reference.to_string(),
                    detail: e.to_string(),
                });
            }
        };
        if let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&reference.key)) {
            return SecretValue::from_secret_bytes(reference, bytes.0.clone());
        }
        if let Some(text) = secret.string_data.as_ref().and_then(|d| d.get(&reference.key)) {
            return SecretValue::from_secret_bytes(reference, text.clone().into_bytes());
        }
        Err(SecretError::NotFound {
            reference: reference.to_string(),
            detail: format!(
                "Secret {}/{} has no key {:?}",
                reference.namespace, reference.name, reference.key
            ),
        })
    }
}

impl SecretResolver for KubeSecrets {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        Box::pin(self.lookup(reference))
    }
}
