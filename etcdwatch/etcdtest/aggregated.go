package etcdtest

import (
	"bytes"
	"fmt"

	apiextensionsinstall "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	apiregistrationinstall "k8s.io/kube-aggregator/pkg/apis/apiregistration/install"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1beta1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1beta1"
)

// The API servers that kube-apiserver chains in front of its own store
// their objects through their own schemes: apiextensions-apiserver the
// CustomResourceDefinitions, kube-aggregator the APIServices.
var (
	apiextensionsScheme = runtime.NewScheme()
	aggregatorScheme    = runtime.NewScheme()
)

func init() {
	apiextensionsinstall.Install(apiextensionsScheme)
	apiregistrationinstall.Install(aggregatorScheme)
}

// storedAs is how kube-apiserver v1.34 stores the objects of a chained
// API server (k8s.io/kubernetes pkg/controlplane/apiserver,
// apiextensions.go and aggregator.go): as JSON, through the legacy codec
// of that server's scheme, in the first of its versions, whatever
// --storage-media-type says.
var storedAs = map[string]struct {
	scheme *runtime.Scheme
	codec  runtime.Codec
}{
	apiextensionsv1.GroupName:   {apiextensionsScheme, serializer.NewCodecFactory(apiextensionsScheme).LegacyCodec(apiextensionsv1beta1.SchemeGroupVersion, apiextensionsv1.SchemeGroupVersion)},
	apiregistrationv1.GroupName: {aggregatorScheme, serializer.NewCodecFactory(aggregatorScheme).LegacyCodec(apiregistrationv1.SchemeGroupVersion, apiregistrationv1beta1.SchemeGroupVersion)},
}

// EncodeStored encodes a CustomResourceDefinition or an APIService (of
// any version) as kube-apiserver stores it: the server holds the internal
// object, and its storage codec writes JSON of the storage version
// (apiextensions.k8s.io/v1beta1, apiregistration.k8s.io/v1).
func EncodeStored(obj runtime.Object) ([]byte, error) {
	gvk, _, err := kindOf(obj)
	if err != nil {
		return nil, err
	}
	s, ok := storedAs[gvk.Group]
	if !ok {
		return nil, fmt.Errorf("encode %T: kube-apiserver stores %s objects itself: use Encode", obj, gvk.Group)
	}
	internal, err := s.scheme.ConvertToVersion(obj, schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	var b bytes.Buffer
	if err := s.codec.Encode(internal, &b); err != nil {
		return nil, fmt.Errorf("encode %T: %w", obj, err)
	}
	return b.Bytes(), nil
}

// MustEncodeStored is EncodeStored for fixtures that are known to encode.
func MustEncodeStored(obj runtime.Object) []byte {
	return mustBytes(EncodeStored(obj))
}

// CustomResourceDefinition is the CRD of widgets.<group>: namespaced, one
// version served and stored with a schema, Established, as the API
// server keeps it after `kubectl apply`.
func CustomResourceDefinition(group string, i int) *apiextensionsv1.CustomResourceDefinition {
	m := meta("", "widgets."+group, i)
	m.Labels = nil
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: m,
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer", Minimum: ptrFloat(1)},
						}},
					},
				}},
			}},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, LastTransitionTime: created, Reason: "NoConflicts", Message: "no conflicts found"},
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, LastTransitionTime: created, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"},
			},
			AcceptedNames:  apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"}},
			StoredVersions: []string{"v1"},
		},
	}
}

// APIService is the APIService kube-apiserver registers for one of its
// own group versions (v1.apps): served locally, Available.
func APIService(group, version string, i int) *apiregistrationv1.APIService {
	m := meta("", version+"."+group, i)
	m.Labels = map[string]string{"kube-aggregator.kubernetes.io/automanaged": "onstart"}
	return &apiregistrationv1.APIService{
		ObjectMeta: m,
		Spec:       apiregistrationv1.APIServiceSpec{Group: group, Version: version, GroupPriorityMinimum: 17800, VersionPriority: 15},
		Status: apiregistrationv1.APIServiceStatus{Conditions: []apiregistrationv1.APIServiceCondition{
			{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue, LastTransitionTime: created, Reason: "Local", Message: "Local APIServices are always available"},
		}},
	}
}

func ptrFloat(f float64) *float64 { return &f }

// schemes know the types fixtures are made of: k8s.io/api's, then the
// chained API servers'.
var schemes = []*runtime.Scheme{scheme.Scheme, apiextensionsScheme, aggregatorScheme}

// kindOf is the object's group, version and kind, and the first scheme
// that knows its type.
func kindOf(obj runtime.Object) (schema.GroupVersionKind, *runtime.Scheme, error) {
	for _, s := range schemes {
		if gvks, _, err := s.ObjectKinds(obj); err == nil {
			return gvks[0], s, nil
		}
	}
	return schema.GroupVersionKind{}, nil, fmt.Errorf("encode %T: no scheme knows it", obj)
}
