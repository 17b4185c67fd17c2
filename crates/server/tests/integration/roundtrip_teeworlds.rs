//! Round trip: muster-query reads the teeworlds responder served by muster-server.
