//! Client–server connection establishment over the sockaddr connection manager: a server
//! listens on an IP and port; a client's endpoint is created from that socket address.
//! The two exchange worker addresses over the connection (see `uct::cm`), then talk over
//! the normal transports (shm on one host, tcp between hosts).

use crate::worker::{Ep, Worker};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use ucs::{Result, Status};
use uct::cm::{CmClient, ConnRequest, Listener, Verdict};

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

#[derive(Default)]
pub(crate) struct CmState {
    pub listeners: Vec<Option<ListenerSlot>>,
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

impl Worker {
    /// Listens on `addr` (port 0: any free port; [`Worker::listener_addr`] tells which).
    pub fn listener_create(
        &mut self,
        addr: SocketAddr,
        handler: ConnHandler,
    ) -> Result<ListenerId> {
        let listener = Listener::bind(addr)?;
        self.add_wakeup_fd(listener.fd())?;
        // Clients will learn our worker address: interfaces must be progressed from now.
        let _ = self.address();
        let cm = &mut self.cm;
        cm.listeners.push(Some(ListenerSlot { listener, handler }));
        Ok(ListenerId((cm.listeners.len() - 1) as u32))
    }

    /// The address a listener is bound to.
    pub fn listener_addr(&self, id: ListenerId) -> Result<SocketAddr> {
        match self.cm.listeners.get(id.0 as usize) {
            Some(Some(s)) => Ok(s.listener.local_addr()),
            _ => Err(Status::InvalidParam),
        }
    }

    /// Stops listening; requests not yet answered are rejected.
    pub fn listener_destroy(&mut self, id: ListenerId) -> Result<()> {
        let slot = self
            .cm
            .listeners
            .get_mut(id.0 as usize)
            .and_then(Option::take)
            .ok_or(Status::InvalidParam)?;
        self.remove_wakeup_fd(slot.listener.fd());
        let mine: Vec<u64> = self
            .cm
            .requests
            .iter()
            .filter(|(_, (l, _))| *l == id.0)
            .map(|(k, _)| *k)
            .collect();
        for k in mine {
            if let Some((_, r)) = self.cm.requests.remove(&k) {
                let _ = r.reject();
            }
        }
        Ok(())
    }

    /// The client's socket address of a pending request.
    pub fn conn_request_client(&self, req: ConnReqId) -> Result<SocketAddr> {
        self.cm
            .requests
            .get(&req.0)
            .map(|(_, r)| r.client)
            .ok_or(Status::InvalidParam)
    }

    /// Rejects a request: the client's endpoint creation fails with `Rejected`.
    pub fn listener_reject(&mut self, req: ConnReqId) -> Result<()> {
        let (_, r) = self
            .cm
            .requests
            .remove(&req.0)
            .ok_or(Status::InvalidParam)?;
        r.reject()
    }

    /// Accepts a request: creates the endpoint to the client and answers with this
    /// worker's address.
    pub fn ep_create_from_request(&mut self, req: ConnReqId) -> Result<Ep> {
        let (_, r) = self
            .cm
            .requests
            .remove(&req.0)
            .ok_or(Status::InvalidParam)?;
        let ep = match self.ep_create(&r.blob) {
            Ok(ep) => ep,
            Err(s) => {
                let _ = r.reject();
                return Err(s);
            }
        };
        let me = self.address();
        r.accept(&me)?;
        Ok(ep)
    }

    /// Creates an endpoint to the server listening at `server`: connects, exchanges worker
    /// addresses (progressing this worker meanwhile, so a listener of its own is served
    /// too) and returns the endpoint, or `Rejected`, `Unreachable` (nothing listens there,
    /// or the network does not reach it) or `TimedOut`.
    pub fn ep_create_sockaddr(&mut self, server: SocketAddr, timeout: Duration) -> Result<Ep> {
        let me = self.address();
        let mut c = CmClient::connect(server, &me)?;
        let deadline = Instant::now() + timeout;
        loop {
            match c.poll()? {
                Some(Verdict::Accepted(blob)) => {
                    c.close();
                    return self.ep_create(&blob);
                }
                Some(Verdict::Rejected) => return Err(Status::Rejected),
                None => {}
            }
            if Instant::now() > deadline {
                return Err(Status::TimedOut);
            }
            if self.progress() == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}
