//! The context: the features an application asked for, the configuration, and the
//! transport resources this host has. Workers are created from it.

use crate::config::Config;
use bitflags::bitflags;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use ucs::{Result, Status};
use uct::{IfaceAttr, IfaceConfig, Md, Transport};

bitflags! {
    /// Features requested by the application (UCP_FEATURE_* of UCX).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Features: u64 {
        const TAG = 1 << 0;
        const RMA = 1 << 1;
        const AMO32 = 1 << 2;
        const AMO64 = 1 << 3;
        const WAKEUP = 1 << 4;
        const STREAM = 1 << 5;
        const AM = 1 << 7;
    }
}

/// A transport found on this host, with the attributes of its interface.
#[derive(Clone, Debug)]
pub struct Resource {
    pub transport: Transport,
    pub device: String,
    pub attr: IfaceAttr,
}

struct Inner {
    features: Features,
    /// One memory domain per resource, shared by every worker of the context.
    mds: Vec<Arc<Md>>,
    /// Allocates `mem_map` memory when no resource's domain can (tcp only).
    alloc_md: Arc<Md>,
    /// Regions mapped with `mem_map`, by key id: what emulated remote accesses are
    /// checked against.
    regions: Mutex<HashMap<u64, (u64, u64)>>,
    config: Config,
    iface_config: IfaceConfig,
    resources: Vec<Resource>,
}

/// A context; cheap to clone (shared).
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

impl Context {
    /// Creates a context with `features`, reading the configuration from the environment.
    pub fn new(features: Features) -> Result<Context> {
        Self::with_config(features, Config::from_env()?, IfaceConfig::from_env()?)
    }

    /// Creates a context with explicit configuration.
    pub fn with_config(
        features: Features,
        config: Config,
        iface_config: IfaceConfig,
    ) -> Result<Context> {
        ucs::log::init();
        let mut resources = Vec::new();
        for &t in &config.transports {
            for (dev, _) in t.devices() {
                match uct::Iface::open_device(t, &dev, &iface_config) {
                    Ok(i) => resources.push(Resource {
                        transport: t,
                        device: dev,
                        attr: i.attr().clone(),
                    }),
                    Err(s) => tracing::info!("transport {} on {dev} unavailable: {s}", t.name()),
                }
            }
        }
        if resources.is_empty() {
            tracing::error!("no transport is available (UCX_TLS excludes all of this build's)");
            return Err(Status::NoDevice);
        }
        ucs::config::warn_unknown();
        let mds = resources
            .iter()
            .map(|r| Arc::new(Md::open(r.transport)))
            .collect();
        Ok(Context {
            inner: Arc::new(Inner {
                features,
                mds,
                alloc_md: Arc::new(Md::open(Transport::Shm)),
                regions: Mutex::default(),
                config,
                iface_config,
                resources,
            }),
        })
    }

    pub fn features(&self) -> Features {
        self.inner.features
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn iface_config(&self) -> &IfaceConfig {
        &self.inner.iface_config
    }

    /// The memory domain of resource `i`.
    pub(crate) fn md(&self, i: usize) -> &Arc<Md> {
        &self.inner.mds[i]
    }

    /// The domain `mem_map` allocates in: the shm resource's, else a private one.
    pub(crate) fn alloc_md(&self) -> (Transport, &Arc<Md>) {
        match self
            .resources()
            .iter()
            .position(|r| r.transport == Transport::Shm)
        {
            Some(i) => (Transport::Shm, self.md(i)),
            None => (Transport::Shm, &self.inner.alloc_md),
        }
    }

    /// The mapped regions registry.
    pub(crate) fn regions(&self) -> &Mutex<HashMap<u64, (u64, u64)>> {
        &self.inner.regions
    }

    /// The transports found.
    pub fn resources(&self) -> &[Resource] {
        &self.inner.resources
    }
}
