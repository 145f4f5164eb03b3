//! The client–server connection state of a worker: its listeners, the connection
//! requests waiting for the application, and the client connections in progress (see
//! `uct::cm`). The API over it is in `worker::listener`.

use std::net::SocketAddr;
use std::time::Instant;
use uct::cm::{CmClient, ConnRequest, Listener};

/// A listener of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(pub(crate) u32);

/// A connection request waiting for the application's accept or reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnReqId(pub(crate) u64);

/// Called (from progress) for each connection request: its id and the client's address.
pub type ConnHandler = Box<dyn FnMut(ConnReqId, SocketAddr) + Send>;

pub(crate) struct ListenerSlot {
    pub listener: Listener,
    pub handler: ConnHandler,
}

/// An endpoint made from a server's socket address, waiting for the server's answer.
pub(crate) struct Connecting {
    pub ep: u32,
    pub client: CmClient,
    pub deadline: Instant,
}

#[derive(Default)]
pub(crate) struct CmState {
    pub listeners: Vec<Option<ListenerSlot>>,
    /// Client connections in progress.
    pub connecting: Vec<Connecting>,
    /// Local and remote socket addresses of the endpoints made through a listener or to
    /// a server, by endpoint.
    pub sockaddrs: std::collections::HashMap<u32, (Option<SocketAddr>, SocketAddr)>,
    pub requests: std::collections::HashMap<u64, (u32, ConnRequest)>,
    pub next_req: u64,
    /// Requests whose handler has not run yet.
    pub new_requests: Vec<(u32, u64, SocketAddr)>,
}

impl CmState {
    /// Accepts connections on every listener; returns true when requests arrived.
    pub fn poll(&mut self) -> bool {
        let mut any = false;
        for (i, slot) in self.listeners.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            for req in slot.listener.poll() {
                self.next_req += 1;
                let id = self.next_req;
                self.new_requests.push((i as u32, id, req.client));
                self.requests.insert(id, (i as u32, req));
                any = true;
            }
        }
        any
    }
}
