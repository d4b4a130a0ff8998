"""Where new problems come from: documents turned into verifiable QA (:mod:`polyrl.synth.qa`)."""
