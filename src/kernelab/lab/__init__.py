"""The phase as one run: `kernelab lab`, its report, the exit-criteria gate and the drill."""
