"""The snapshot's fields in yt: ("amrzip", name) for each stored field, in the units the
source recorded (dimensionless where it recorded none), and ("gas", ...) aliases for the
usual names when those units fit, so that yt's derived gas fields work."""

from __future__ import annotations

from yt.fields.field_info_container import FieldInfoContainer
from yt.units import Unit, dimensions

# yt gas field: (its dimensions, the field names codes commonly write for it)
_GAS = {
    "density": (dimensions.density, ("density", "rho", "dens")),
    "temperature": (dimensions.temperature, ("temperature", "temp", "Temp")),
    "pressure": (dimensions.pressure, ("pressure", "pres")),
    **{
        f"velocity_{a}": (dimensions.velocity, (f"{a}_velocity", f"velocity_{a}", f"{a}vel", f"vel_{a}", f"v{a}"))
        for a in "xyz"
    },
}


class AMRZipFieldInfo(FieldInfoContainer):
    # Units come from the snapshot (the dataset's field_units), not from a fixed table.
    known_other_fields = ()
    known_particle_fields = ()

    def setup_fluid_fields(self):
        stored = {name for ftype, name in self.field_list if ftype == "amrzip"}
        for gas, (dims, names) in _GAS.items():
            name = next((n for n in names if n in stored), None)
            if name is None:
                continue
            if Unit(self["amrzip", name].units, registry=self.ds.unit_registry).dimensions == dims:
                self.alias(("gas", gas), ("amrzip", name))
