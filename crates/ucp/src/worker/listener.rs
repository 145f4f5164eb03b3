//! Client–server connection establishment over the sockaddr connection manager: a server
//! listens on an IP and port; a client's endpoint is created from that socket address.
//! The two exchange worker addresses over the connection (see `uct::cm`), then talk over
//! the normal transports (shm on one host, tcp between hosts).

use super::Worker;
use crate::cm::*;
use crate::core::ep::{Ep, EpStatus};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use ucs::{Result, Status};
use uct::cm::{CmClient, ConnRequest, Listener, Verdict};

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

    /// Takes a request out of this worker, to be accepted by another worker (of this or
    /// another context) with [`Worker::ep_create_accept`]. The request stays with the
    /// caller: dropping it closes the client's connection.
    pub fn conn_request_take(&mut self, req: ConnReqId) -> Result<ConnRequest> {
        self.cm
            .requests
            .remove(&req.0)
            .map(|(_, r)| r)
            .ok_or(Status::InvalidParam)
    }

    /// Accepts a request: creates the endpoint to the client and answers with this
    /// worker's address.
    pub fn ep_create_from_request(&mut self, req: ConnReqId) -> Result<Ep> {
        let r = self.conn_request_take(req)?;
        self.ep_create_accept(r)
    }

    /// Accepts a request taken from a listener of any worker: this worker creates the
    /// endpoint to the client and answers with its own address, so the client talks to
    /// this worker from then on.
    pub fn ep_create_accept(&mut self, r: ConnRequest) -> Result<Ep> {
        let ep = match self.ep_create(&r.blob) {
            Ok(ep) => ep,
            Err(s) => {
                let _ = r.reject();
                return Err(s);
            }
        };
        let me = self.address();
        let addrs = (r.local_addr(), r.client);
        if let Err(s) = r.accept(&me) {
            let _ = self.ep_close_nb(ep, true);
            return Err(s);
        }
        self.cm.sockaddrs.insert(ep.0, addrs);
        Ok(ep)
    }

    /// Creates an endpoint to the server listening at `server` and returns it at once.
    /// The connection and the exchange of worker addresses go on in progress; operations
    /// on the endpoint queue until the server answered. A refusal (`Rejected`), nothing
    /// listening (`Unreachable`) or no answer within `timeout` (`TimedOut`) fails the
    /// endpoint: its queued operations complete with that status and its error handler
    /// runs.
    pub fn ep_create_sockaddr(&mut self, server: SocketAddr, timeout: Duration) -> Result<Ep> {
        let me = self.address();
        let idx = self.core.insert_ep(crate::address::WorkerAddress {
            uuid: 0,
            host_id: 0,
            ifaces: Vec::new(),
        });
        match CmClient::connect(server, &me) {
            Ok(client) => {
                if let Err(s) = self.add_wakeup_fd(client.fd()) {
                    self.core.take_ep(idx);
                    return Err(s);
                }
                self.cm.sockaddrs.insert(idx, (client.local_addr(), server));
                if let Ok(e) = self.core.ep_mut(idx) {
                    e.status = EpStatus::Connecting;
                }
                self.cm.connecting.push(Connecting {
                    ep: idx,
                    client,
                    deadline: Instant::now() + timeout,
                });
            }
            Err(s) => crate::core::fail_ep(&mut self.core, idx, s),
        }
        Ok(self.core.handle(idx))
    }

    /// The local and remote socket addresses of an endpoint made through a listener or
    /// to a server's socket address (`NotConnected` for other endpoints).
    pub fn ep_sockaddrs(&self, ep: Ep) -> Result<(Option<SocketAddr>, SocketAddr)> {
        self.core.check(ep)?;
        self.core.ep(ep.0)?;
        self.cm
            .sockaddrs
            .get(&ep.0)
            .copied()
            .ok_or(Status::NotConnected)
    }

    /// Advances the client connections in progress; returns how many finished.
    pub(crate) fn poll_connecting(&mut self) -> usize {
        let mut done = 0;
        let mut i = 0;
        while i < self.cm.connecting.len() {
            let c = &mut self.cm.connecting[i];
            let ep = c.ep;
            let verdict = match c.client.poll() {
                Ok(None) if Instant::now() > c.deadline => Err(Status::TimedOut),
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Ok(Some(v)) => Ok(v),
                Err(s) => Err(s),
            };
            let c = self.cm.connecting.swap_remove(i);
            self.remove_wakeup_fd(c.client.fd());
            c.client.close();
            done += 1;
            let result = match verdict {
                Ok(Verdict::Accepted(blob)) => self.resolve_connecting(ep, &blob),
                Ok(Verdict::Rejected) => Err(Status::Rejected),
                Err(s) => Err(s),
            };
            if let Err(s) = result {
                tracing::debug!("connection to a server failed: {s}");
                crate::core::fail_ep(&mut self.core, ep, s);
            }
        }
        done
    }

    /// Gives a connecting endpoint the server's worker address and connects it; what was
    /// queued on it goes out in order.
    fn resolve_connecting(&mut self, ep: u32, blob: &[u8]) -> Result<()> {
        let remote = crate::address::WorkerAddress::decode(blob)?;
        let uuid = remote.uuid;
        if let Some(&other) = self.core.by_uuid.get(&uuid) {
            // The server reached us first (its wireup made an endpoint here): this
            // endpoint takes over that one's connection and received data.
            crate::engine::adopt_implicit(&mut self.core, &mut self.p, ep, other);
        }
        let e = self.core.ep_mut(ep)?;
        e.remote = remote;
        if e.status == EpStatus::Connecting {
            e.status = EpStatus::Created;
        }
        let lane = e.lane;
        let queued = !e.queue.is_empty();
        self.core.by_uuid.insert(uuid, ep);
        match lane {
            Some(_) => {
                if queued {
                    self.core.active.push_back(ep);
                }
                Ok(())
            }
            None => crate::core::connect(&mut self.tls, &mut self.core, ep).map(drop),
        }
    }
}
