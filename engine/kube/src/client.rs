//! Building a [`kube::Client`].

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Installs ring as the process-wide rustls crypto provider, once. kube's TLS stack (rustls) panics when it
/// cannot pick a provider, which happens as soon as some other dependency enables rustls' `aws-lc-rs`
/// feature next to kube's `ring`. Idempotent; call before building the first client.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// kube's reason.
        source: kube::config::KubeconfigError,
    },
    /// kube could not build a client from the configuration.
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// The client configuration from a kubeconfig file (its current context).
pub async fn config_from_kubeconfig(path: &Path) -> Result<Config, ClientError> {
    let wrap = |source| ClientError::Kubeconfig { path: path.display().to_string(), source };
    let kubeconfig = Kubeconfig::read_from(path).map_err(wrap)?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.map_err(wrap)
}

/// A client for the current context of a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, ClientError> {
    install_crypto_provider();
    Ok(Client::try_from(config_from_kubeconfig(path).await?)?)
}

/// A client from the environment: `KUBECONFIG` / `~/.kube/config`, else the in-cluster service account.
pub async fn client_from_env() -> Result<Client, ClientError> {
    install_crypto_provider();
    Ok(Client::try_default().await?)
}
