//! Round trip: muster-query reads the unreal2 responder served by muster-server.
