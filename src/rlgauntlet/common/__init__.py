"""What every layer shares: per-episode random streams (seeding), the thread policy, file
checksums (hashing), where results go and how they are marked (outputs), and the executors that
run cells in local worker processes or on Ray (executors).

May import: errors, version. Everything else may import it."""
