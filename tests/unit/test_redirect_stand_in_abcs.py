"""torch 2.4-2.5's torch.cuda.Event / Stream derive from the abstract torch._streambase._EventBase /
_StreamBase, and importing torch._dynamo (the first optimizer does) asserts ``issubclass(torch.cuda.Event,
_EventBase)``.  hal's stand-ins for those classes answer yes to every abstract base of torch's class.  Here a
class shaped as 2.4's stands for it; on 2.4 itself `make torch-window` runs hal run with an optimizer."""
import abc

from hal.redirect._cuda_classes import Spec, stand_in


class EventBase(abc.ABC):  # torch._streambase._EventBase in torch 2.4
    @abc.abstractmethod
    def wait(self, stream=None):
        ...


class CudaEvent(EventBase):  # torch.cuda.Event in torch 2.4
    def wait(self, stream=None):
        pass


class BackendEvent:  # the backend's event class, which knows nothing of CUDA's bases
    pass


def test_a_stand_in_is_a_subclass_of_the_abstract_bases_of_torchs_class():
    standin = stand_in("Event", Spec(CudaEvent, CudaEvent, lambda *a, **k: BackendEvent(), BackendEvent))
    assert issubclass(standin, EventBase)  # what torch 2.4's DeviceInterfaceMeta asserts
    # and the backend's events, which the user's code takes for torch.cuda.Event, are taken for its bases too
    assert issubclass(BackendEvent, standin) and issubclass(BackendEvent, EventBase)
    assert not issubclass(int, EventBase)
