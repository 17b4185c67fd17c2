//! Round trip: muster-query reads the gamespy1 responder served by muster-server.
