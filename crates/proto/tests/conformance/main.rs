//! Conformance tests against real third-party peers (qstat, gamedig, opengsq, teeworlds-server, ddnet-server).
