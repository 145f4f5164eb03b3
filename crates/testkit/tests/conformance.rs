//! The transport conformance suite (see `testkit::conformance`), once per transport.
//! A new transport is one more line.

use uct::Transport;

testkit::conformance_suite!(self_tl, Transport::SelfTl);
testkit::conformance_suite!(shm, Transport::Shm);
testkit::conformance_suite!(tcp, Transport::Tcp);
testkit::conformance_suite!(udp, Transport::Udp);
testkit::conformance_suite!(fabric, Transport::Fabric);
