//! Round trip: muster-query reads the gameagent responder served by muster-server.
